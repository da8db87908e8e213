"""The ``hetlab`` console script: ``doctor``, ``head``, ``join`` (notebook 04), ``train`` (notebook 07),
``search`` (notebook 09), ``rehearse`` (the real pair rehearsed on one Linux box) and ``gpu-check`` (the course's CUDA claims
on a machine with an NVIDIA card).

Each subcommand is one ``_add_<name>(subparsers)`` that registers its arguments
and one ``_<name>(args) -> int`` that does the work; ``main`` turns a HetlabError
into its one line on stderr and exit status 2. To add a subcommand, write the
pair and list the ``_add_`` function in ``SUBCOMMANDS``.
"""
from __future__ import annotations

import argparse
import sys

from hetlab.errors import HetlabError
from hetlab.tools.searchcli import add_search
from hetlab.vocab import CLI_MODES, MODEL_NAMES, TRANSFERS


def _add_doctor(sub) -> None:
    p = sub.add_parser("doctor", help="check this machine (and the head) before joining a cluster")
    p.add_argument("--head", metavar="ADDRESS", help="head's IP:PORT, e.g. 192.168.1.10:6379")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the head")
    p.set_defaults(run=_doctor)


def _doctor(args) -> int:
    from hetlab.tools import preflight
    checks = preflight.doctor(head=args.head, timeout=args.timeout)
    print(preflight.render(checks))
    return 0 if all(c.ok for c in checks) else 1


GCS_PORT = 6379  # hetlab.commands.Ports().gcs, named here: building the parser loads no Ray (a bad
                 # argument, --help, or a command that needs no Ray answers at once)


def _ports_args(p) -> None:
    p.add_argument("--port", type=int, default=GCS_PORT, help=f"head's GCS port (default {GCS_PORT})")
    p.add_argument("--num-cpus", type=int, default=None, help="CPUs this node offers Ray")
    p.add_argument("--num-gpus", type=int, default=None, help="GPUs this node offers Ray")


def _add_head(sub) -> None:
    p = sub.add_parser("head", help="print the commands that start the head (the Linux desktop)")
    p.add_argument("--ip", required=True, help="this machine's LAN IP (Linux: hostname -I)")
    p.add_argument("--role", default="desktop", help="hetlab role of this node (default desktop)")
    _ports_args(p)
    p.set_defaults(run=_head)


def _head(args) -> int:
    from hetlab import commands
    ports = commands.Ports(gcs=args.port)
    print(commands.render_head(args.ip, ports, role=args.role, cpus=args.num_cpus, gpus=args.num_gpus))
    return 0


def _add_join(sub) -> None:
    p = sub.add_parser("join", help="print the commands that join a machine (the Mac) to the head")
    p.add_argument("--head", required=True, help="the head's LAN IP")
    p.add_argument("--ip", default=None, help="this machine's LAN IP (macOS: ipconfig getifaddr en0)")
    p.add_argument("--role", default="mac", help="hetlab role of this node (default mac)")
    p.add_argument("--linux", action="store_true", help="the joining machine is not a Mac")
    _ports_args(p)
    p.set_defaults(run=_join)


def _join(args) -> int:
    from hetlab import commands
    print(commands.render_join(args.head, args.ip, commands.Ports(gcs=args.port), mac=not args.linux,
                               role=args.role, cpus=args.num_cpus, gpus=args.num_gpus))
    return 0


# --- train (notebook 07/08): headless heterogeneous training through the parameter server ---

TRAIN_EXAMPLES = """  hetlab train --steps 200                       practice cluster here: desktop + simulated mac
  hetlab train --ratio 3:1 --mode local-sgd --local-steps 8 --transfer fp16
  hetlab train --checkpoint-dir ckpt --checkpoint-every 50
  hetlab train --steps 400 --checkpoint-dir ckpt --resume ckpt    continue to step 400
  hetlab train --address 192.168.1.10:6379      the real desktop + Mac cluster (notebook 04)"""


TRAIN_SAMPLES_QUICK, TRAIN_SAMPLES_FULL = 10000, 60000  # --train-samples default (quick mode / full)


def _subcommand(sub, name: str, help: str, description: str, examples: str):
    """A subcommand whose --help shows its description and examples as written."""
    return sub.add_parser(name, help=help, description=description, epilog="examples:\n" + examples,
                          formatter_class=argparse.RawDescriptionHelpFormatter)


def _add_train(sub) -> None:
    from hetlab import is_quick
    quick = is_quick()
    p = _subcommand(
        sub, "train", "train MNIST across the desktop and the Mac, headless",
        "Train the MNIST CNN with hetlab's parameter server, one worker per machine\n"
        "(desktop and mac), and print progress and the final test accuracy. Without\n"
        "--address a practice cluster starts on this machine, where the mac is a\n"
        "simulated slower device.", TRAIN_EXAMPLES)
    where = p.add_argument_group("where it runs")
    where.add_argument("--address", metavar="IP:PORT", help="head of a running hetlab cluster "
                       "(default: HETLAB_ADDRESS or RAY_ADDRESS if set, else a practice cluster on "
                       "this machine)")
    where.add_argument("--slowdown", type=float, default=None, metavar="X",
                       help="make the mac worker a simulated X× slower device (practice default 4; "
                            "with --address default 1 = real speed)")
    what = p.add_argument_group("what it trains")
    what.add_argument("--steps", type=int, default=40 if quick else 200, metavar="N",
                      help="train until server step N (local-sgd: N rounds of H local steps); "
                           "default %(default)s")
    what.add_argument("--global-batch", type=int, default=128, metavar="B",
                      help="samples per step over both workers (default %(default)s)")
    what.add_argument("--ratio", default="auto", metavar="auto|A:B",
                      help="desktop:mac share of each batch, e.g. 3:1; auto = measure and tune "
                           "(default auto)")
    what.add_argument("--mode", default="sync", metavar="sync|async|local-sgd",
                      help="synchronous steps, asynchronous updates, or local SGD (default sync)")
    what.add_argument("--local-steps", type=int, default=8, metavar="H",
                      help="local-sgd: local steps between exchanges (default %(default)s)")
    what.add_argument("--transfer", default="fp32", metavar="fp32|fp16|bf16",
                      help="number format of gradients/deltas on the wire (default fp32)")
    what.add_argument("--train-samples", type=int, default=None, metavar="N",
                      help="use the first N of a fixed shuffle of MNIST's 60,000 (default "
                           f"{TRAIN_SAMPLES_QUICK if quick else TRAIN_SAMPLES_FULL}; with --resume: the "
                           f"checkpoint's)")
    what.add_argument("--model", default="small", metavar="NAME|MODULE:FUNCTION",
                      help="a built-in network (small, classic, ray_example) or your own: "
                           "MODULE:FUNCTION, a function returning an nn.Module (for MNIST: 1×28×28 "
                           "inputs, 10 classes), in MODULE.py of this folder (default small)")
    what.add_argument("--data", default=None, metavar="MODULE:FUNCTION",
                      help="your own data instead of MNIST: a function in MODULE.py of this folder "
                           "returning (train, test), each (x, y) tensors or a map-style torch Dataset "
                           "of (input, label) items")
    what.add_argument("--loss", default=None, metavar="MODULE:FUNCTION",
                      help="your own loss(outputs, labels) (default: cross-entropy)")
    what.add_argument("--seed", type=int, default=None,
                      help="shuffle and initial weights (default 0; with --resume: the checkpoint's)")
    ckpt = p.add_argument_group("checkpoints")
    ckpt.add_argument("--checkpoint-dir", metavar="DIR", help="save checkpoints here (this machine's disk)")
    ckpt.add_argument("--checkpoint-every", type=int, default=None, metavar="N",
                      help="save every N steps (default 50 when --checkpoint-dir is given)")
    ckpt.add_argument("--resume", metavar="FILE|DIR", help="continue from a checkpoint file, or the "
                      "newest one in DIR, until step --steps (beyond the checkpoint's step)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(run=_train)


def parse_ratio(text: str) -> str | list[float]:
    """``"auto"`` or ``"A:B"`` (desktop:mac) → ``"auto"`` or ``[A, B]``; anything else → HetlabError."""
    if text == "auto":
        return text
    parts = text.split(":")
    try:
        values = [float(x) for x in parts]
    except ValueError:
        values = []
    if len(parts) != 2 or len(values) != 2 or not all(0 < v < float("inf") for v in values):
        raise HetlabError(f"--ratio {text!r}: use auto or two positive numbers desktop:mac, e.g. 3:1.")
    return values


def _check_train_args(args) -> dict:
    """Validate everything before any Ray starts; returns the parsed options."""
    if args.mode not in CLI_MODES:
        raise HetlabError(f"--mode {args.mode!r}: use sync, async or local-sgd.")
    model = model_arg(args.model)
    loss = function_arg("--loss", args.loss) if args.loss else None
    if loss is not None:
        from hetlab.models import as_loss
        loss = as_loss(loss)
    data = None
    if args.data:
        if args.train_samples is not None:
            raise HetlabError("--train-samples picks from MNIST: with --data, give your function the size you want.")
        data = data_arg(args.data, function_arg("--data", args.data))
    if args.transfer not in TRANSFERS:
        raise HetlabError(f"--transfer {args.transfer!r}: use fp32, fp16 or bf16.")
    resume, ckpt = _resume_target(args.resume, None if isinstance(model, str) else model)
    seed, samples = _seed_and_samples(args, resume, ckpt)
    if data is not None:
        samples = len(data[0][1])
    for flag, value, low in (("--steps", args.steps, 1), ("--global-batch", args.global_batch, 2),
                             ("--local-steps", args.local_steps, 1),
                             ("--train-samples", samples, args.global_batch)):
        if value < low:
            raise HetlabError(f"{flag} {value}: must be at least {low}.")
    if data is None and samples > 60000:
        raise HetlabError(f"--train-samples {samples}: MNIST has 60000 training samples.")
    if ckpt is not None and args.steps <= ckpt["step"]:
        raise HetlabError(f"--steps {args.steps}: the checkpoint {resume} is at step {ckpt['step']} and "
                          f"--steps is the step to train until: give --steps greater than {ckpt['step']}.")
    if args.slowdown is not None and not 1 <= args.slowdown < float("inf"):
        raise HetlabError(f"--slowdown {args.slowdown}: must be ≥ 1 (1 = real speed).")
    every = args.checkpoint_every
    if every is not None and (every < 1 or not args.checkpoint_dir):
        raise HetlabError("--checkpoint-every needs --checkpoint-dir and a value ≥ 1.")
    return {"mode": CLI_MODES[args.mode], "ratio": parse_ratio(args.ratio), "resume": resume, "model": model,
            "loss": loss, "data": data,
            "seed": seed, "train_samples": samples,
            "every": every if every is not None else (50 if args.checkpoint_dir else 0)}


def model_arg(text: str):
    """``--model``: a built-in name (kept as the name), or ``module:function`` → that function,
    imported from this folder or the Python path and checked (``hetlab.models.as_factory``)."""
    if text in MODEL_NAMES:
        return text
    module_name, _, function = text.partition(":")
    if not module_name or not function.isidentifier():
        raise HetlabError(f"--model {text!r}: use one of {', '.join(MODEL_NAMES)}, or your own "
                          f"network as MODULE:FUNCTION (a function returning an nn.Module).")
    from hetlab.models import as_factory
    return as_factory(function_arg("--model", text))


def function_arg(flag: str, text: str):
    """``MODULE:FUNCTION`` → that function, imported from this folder or the Python path."""
    module_name, _, function = text.partition(":")
    if not module_name or not function.isidentifier():
        raise HetlabError(f"{flag} {text!r}: use MODULE:FUNCTION, a function in MODULE.py of this folder.")
    import importlib
    import os
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # noqa: BLE001 - the learner's module: any import error
        raise HetlabError(f"{flag} {text!r}: cannot import {module_name!r} ({type(e).__name__}: "
                          f"{' '.join(str(e).split())[:120]}): run hetlab train in the folder holding "
                          f"{module_name.replace('.', '/')}.py.") from None
    if not hasattr(module, function) or not callable(getattr(module, function)):
        raise HetlabError(f"{flag} {text!r}: {module_name!r} has no {function!r}.")
    return getattr(module, function)


def data_arg(flag_text: str, function) -> tuple:
    """Call the ``--data`` function: it must return (train, test), each in a form ``as_tensors`` takes."""
    from hetlab.data import as_tensors
    try:
        got = function()
    except Exception as e:  # noqa: BLE001 - the learner's function: any error
        raise HetlabError(f"--data {flag_text!r} raised {type(e).__name__}: {' '.join(str(e).split())[:120]}.") from None
    if not (isinstance(got, (tuple, list)) and len(got) == 2):
        raise HetlabError(f"--data {flag_text!r} returned {type(got).__name__}: return (train, test), each "
                          f"(x, y) tensors or a map-style torch Dataset.")
    return tuple(as_tensors(part) for part in got)


def _resume_target(text: str | None, model=None):
    """``--resume FILE|DIR`` → (checkpoint path, its checked contents), read without Ray; (None, None) if not given."""
    if not text:
        return None, None
    from pathlib import Path

    from hetlab.checkpoint import latest_checkpoint, load_checkpoint
    path = Path(text)
    if path.is_dir():
        path = latest_checkpoint(path)
        if path is None:
            raise HetlabError(f"--resume {text}: no step-*.pt checkpoint in that folder.")
    elif not path.is_file():
        raise HetlabError(f"--resume {text}: no such file or folder.")
    return path, load_checkpoint(path, model=model)


def _seed_and_samples(args, resume, ckpt) -> tuple[int, int]:
    """--seed and --train-samples: given, or the defaults; a resumed run takes the checkpoint's
    and refuses different ones (another seed or size is another data order: not a resume)."""
    from hetlab import is_quick
    seed, samples = args.seed, args.train_samples
    if ckpt is None:
        return (0 if seed is None else seed,
                (TRAIN_SAMPLES_QUICK if is_quick() else TRAIN_SAMPLES_FULL) if samples is None else samples)
    for flag, given, key in (("--seed", seed, "seed"), ("--train-samples", samples, "data_len")):
        saved = ckpt.get(key)
        if given is not None and saved is not None and given != saved:
            raise HetlabError(f"{flag} {given}: the checkpoint {resume} was trained with {flag} {saved}; "
                              f"give {flag} {saved} (or leave it out) to resume it, or start a fresh run "
                              f"without --resume.")
    return (ckpt.get("seed", 0) if seed is None else seed,
            ckpt.get("data_len", TRAIN_SAMPLES_FULL) if samples is None else samples)


def _train(args) -> int:
    opts = _check_train_args(args)
    from hetlab.balance import auto_tune, format_ratio, split_batch
    from hetlab.data import load_mnist
    from hetlab.cluster import requested_address
    from hetlab.pair import the_pair
    from hetlab.ps import ParameterServerTraining
    address = requested_address(args.address)  # --address, else HETLAB_ADDRESS / RAY_ADDRESS
    if address and address != "local":
        print(f"training on the cluster at {address}")
    else:
        from hetlab.practice import display_name
        print(f"starting a practice cluster on this machine: {display_name('desktop')} + {display_name('mac')}")
    with the_pair(practice_slowdown=4.0, slowdown=args.slowdown, address=args.address) as pair:
        workers = pair.workers
        if opts["data"] is not None:
            train, test = opts["data"]
        else:
            train, test = load_mnist("train"), load_mnist("test")
            if opts["train_samples"] < len(train):
                train = train.subset(opts["train_samples"], seed=opts["seed"])
        common = dict(checkpoint_dir=args.checkpoint_dir, checkpoint_every=opts["every"],
                      progress=not args.quiet)
        if opts["resume"]:
            own = {} if isinstance(opts["model"], str) else {"model": opts["model"]}
            if opts["loss"] is not None:
                own["loss"] = opts["loss"]
            run = ParameterServerTraining.resume(opts["resume"], workers, train, **own, **common)
        else:
            run = ParameterServerTraining(workers, train, model=opts["model"], loss=opts["loss"], mode=opts["mode"],
                                          local_steps=args.local_steps, transfer=args.transfer,
                                          seed=opts["seed"], **common)
        with run:
            if opts["resume"]:
                if args.quiet:  # (with progress on, the engine prints this line itself)
                    print(f"resumed from {opts['resume']} at step {run.step}")
                print(f"batch sizes from the checkpoint: {format_ratio(run.batch_sizes)}")
            elif opts["ratio"] == "auto":
                tuned = auto_tune(lambda sizes: run.measure(sizes, steps=2), args.global_batch, 2, rounds=4)
                run.set_batch_sizes(tuned.batch_sizes)
                print(f"ratio auto (measured over {run.step} training steps): {tuned}")
            else:
                run.set_batch_sizes(split_batch(args.global_batch, opts["ratio"]))
            print(f"model {run.model_name} ({run.n_params:,} parameters); "
                  f"workers: {'; '.join(run.labels)}; batch {format_ratio(run.batch_sizes)}")
            records = run.run(max(0, args.steps - run.step))
            accuracy = run.evaluate(test)
            if args.checkpoint_dir:
                print(f"checkpoint: {run.save_checkpoint()}")
            print(f"{run.mode}: step {run.step}, {run.samples_seen} samples, "
                  f"{run.samples_per_s(records):.0f} samples/s, {run.bytes_per_sample:.0f} bytes/sample")
            print(f"final test accuracy: {accuracy:.4f}")
    return 0


# --- rehearse: the real pair on one Linux box (two network namespaces) ---

def _add_rehearse(sub) -> None:
    p = _subcommand(
        sub, "rehearse", "rehearse the real pair on this Linux box: two hosts, a capped link, firewalls",
        "Two network namespaces play the desktop and the Mac: private addresses, a link\n"
        "capped with tc (no latency emulated: this needs netem), nftables firewalls that\n"
        "admit only the printed ports, Ray started by the lines `hetlab head`/`join` print\n"
        "(+ --num-gpus 1: Ray reports a GPU on both real machines; torch here sees a CPU).\n"
        "Needs root, ip, tc and nft.",
        "  sudo hetlab rehearse up --link gigabit\n"
        "  sudo hetlab rehearse run -- hetlab train --steps 40\n"
        "  sudo hetlab rehearse lab                   (JupyterLab on the rehearsal desktop)\n"
        "  sudo hetlab rehearse down")
    p.add_argument("action", choices=("up", "down", "status", "run", "lab"))
    p.add_argument("--link", default="wifi", metavar="wifi|gigabit", help="link cap (default wifi, 200 Mbit/s)")
    p.add_argument("--host", default="desktop", metavar="desktop|mac", help="run: which host (default desktop)")
    p.add_argument("--port", type=int, default=8888, help="lab: the port on this machine (default 8888)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="run: the command, after --")
    p.set_defaults(run=_rehearse, usage=p.format_help)


def _rehearse(args) -> int:
    if args.command[:1] in (["-h"], ["--help"]):  # the command's place swallows them: help, not the action
        print(args.usage())
        return 0
    if args.command and args.action != "run":
        raise HetlabError(f"rehearse {args.action} takes no command ({' '.join(args.command)}): "
                          f"only `hetlab rehearse run -- COMMAND` runs one.")
    from hetlab.tools import rehearsal
    if args.action == "up":
        print("building the rehearsal: two hosts, firewalls, Ray by the printed lines (a minute or two)")
        state = rehearsal.up(args.link)
        print(rehearsal.describe(state))
    elif args.action == "down":
        gone = rehearsal.down()
        print(f"rehearsal down: removed {', '.join(gone) if gone else 'nothing (none was up)'}")
    elif args.action == "status":
        state = rehearsal.status()
        print(rehearsal.describe(state) if state else "no rehearsal is up (sudo hetlab rehearse up)")
        return 0 if state else 1
    elif args.action == "lab":
        return rehearsal.lab(args.port)
    else:
        command = args.command[1:] if args.command[:1] == ["--"] else args.command
        if not command:
            raise HetlabError("rehearse run needs a command after --, e.g. hetlab rehearse run -- hetlab train")
        return rehearsal.run_on(args.host, command).returncode
    return 0


# --- gpu-check: the course's CUDA claims on a machine with an NVIDIA card (hetlab.tools.gpucheck) ---

GPU_CHECK_NAMES = ("describe", "single_device", "notebook01", "pair_ps", "pair_raytrain", "autocast",
                   "sweep")  # hetlab.tools.gpucheck.CHECKS, named here for --help without loading torch


def _add_gpu_check(sub) -> None:
    p = _subcommand(
        sub, "gpu-check", "on a machine with CUDA: check the course's GPU claims, a table + JSON",
        "Run on an NVIDIA GPU what the course claims about one, each with a goal:\n"
        "describe/synchronize, benchmarks/single_device.py, notebook 01's full run, the\n"
        "card + this CPU as a real unlike pair (parameter server with an auto-tuned split,\n"
        "and Ray Train), fp16/bf16 autocast and fp16 on the wire, notebook 02's sweep.\n"
        "Prints a table and, as its last line, one JSON object. Without CUDA it refuses.",
        "  hetlab gpu-check --quick                 a few minutes\n"
        "  hetlab gpu-check --only describe,sweep\n"
        "  hetlab gpu-check --record docs/measured   writes DATE-GPU.json and .md there")
    p.add_argument("--quick", action="store_true", help="fewer repeats, steps and epochs: a few minutes")
    p.add_argument("--only", metavar="NAME[,NAME]",
                   help=f"run only these checks: {', '.join(GPU_CHECK_NAMES)}")
    p.add_argument("--record", metavar="DIR", help="write the dated record (DATE-GPU.json + .md) into DIR")
    p.add_argument("--pair-batch", type=int, default=None, metavar="B",
                   help="global batch of the pair's efficiency run (default: sized so that the card's step "
                        "is about 100 ms, long next to the parameter server's fixed cost per step)")
    p.set_defaults(run=_gpu_check)


def _gpu_check(args) -> int:
    from dataclasses import replace

    from hetlab import is_quick
    from hetlab.tools import gpucheck
    quick = args.quick or is_quick()
    sizes = gpucheck.QUICK if quick else gpucheck.FULL
    if args.pair_batch is not None:
        if args.pair_batch < 2:
            raise HetlabError(f"--pair-batch {args.pair_batch}: must be at least 2 (one sample per worker).")
        sizes = replace(sizes, pair_batch=args.pair_batch)
    result = gpucheck.run(args.only, quick=quick, record=args.record, sizes=sizes)
    return 0 if result["passed"] else 1


SUBCOMMANDS = [_add_doctor, _add_head, _add_join, _add_train, _add_rehearse, _add_gpu_check, add_search]


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser with every registered subcommand."""
    parser = argparse.ArgumentParser(prog="hetlab", description="Train one model across unlike machines.")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in SUBCOMMANDS:
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``hetlab`` console script."""
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except HetlabError as exc:
        print(f"HetlabError: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
