"""The ``hetlab`` console script: ``doctor``, ``head``, ``join``, ``wslconfig`` (notebook 04),
``train`` (07), ``search`` (09), ``report`` (the learner's hand-in, 09) and ``gpu-check`` (an NVIDIA card:
``hetlab.tools.gpucheck``).

``build_parser`` holds every subcommand's arguments; each subcommand runs as one function,
``_<name>(args) -> int``, and ``main`` turns a HetlabError into one line and exit status 2. Building
the parser loads neither Ray nor torch, and every argument is checked before either starts, so a
bad one answers within seconds.
"""
from __future__ import annotations

import argparse
import os
import sys

from hetlab.errors import HetlabError
from hetlab.vocab import CLI_MODES, MODEL_NAMES, Ports

TRAIN_SAMPLES_QUICK, TRAIN_SAMPLES_FULL = 10000, 60000  # hetlab train's --train-samples (quick mode / full)
GLOBAL_BATCH = 128                                      # hetlab train --batch-sizes auto: samples a step
CHECKPOINT_EVERY = 50                                   # hetlab train --checkpoint-dir: steps between saves
GPU_CHECK_NAMES = ("describe", "notebook01", "sweep")  # gpucheck.CHECKS, without loading torch


def print_steps(text: str) -> None:
    """Printed steps (``head``, ``join``): the notes and marker lines go to stderr, each block's
    lines to stdout. A terminal shows them in order; stdout alone (``hetlab join ... | pbcopy`` on the
    Mac) is exactly what to paste, with no note that zsh would try to run."""
    from hetlab.cluster.commands import BEGIN, END
    begin, inside = BEGIN.split("{")[0], False
    for line in text.splitlines():
        marker = line.startswith(begin) or line == END
        inside = line.startswith(begin) or (inside and line != END)
        print(line, file=sys.stdout if inside and not marker else sys.stderr, flush=True)


def _doctor(args) -> int:
    from hetlab.tools import doctor
    checks = doctor.checks(head=args.head)
    print(doctor.render(checks))
    return 0 if all(c.ok for c in checks) else 1


def _saved_pair(args, role: str, flag: str):
    """(the saved pair or None, the head's LAN IP, this machine's, the ports) from the flags, else the
    saved pair; without either, one line saying which flag to give. ``role``: this machine's."""
    from hetlab.cluster import commands
    from hetlab.cluster.connecting import requested_address
    saved = requested_address().pair
    head = args.ip if role == "desktop" else args.head
    if not head and saved is None:
        raise HetlabError(f"no pair saved here yet (notebook 04 saves it once the Mac has joined): give {flag}.")
    mac_ip = args.mac_ip if role == "desktop" else args.ip
    ports = commands.Ports(gcs=args.port if args.port is not None else (saved.port if saved else Ports.gcs))
    return saved, head or saved.desktop_ip, mac_ip or (saved.mac_ip if saved else None), ports


def _head(args) -> int:
    from hetlab.cluster import commands
    from hetlab.windows import wsl
    saved, ip, mac_ip, ports = _saved_pair(args, "desktop", "--ip DESKTOP_IP (this desktop's LAN address: hostname -I)")
    if args.start:
        return commands.start(*commands.head_start(ip, ports))
    if wsl.in_wsl():   # a Windows desktop: the PowerShell steps too
        build = wsl.windows_build(wsl.output(["cmd.exe", "/c", "ver"]))   # through WSL's interop
        print_steps(wsl.render_head(ip, mac_ip, ports, build))
    else:
        print_steps(commands.render_head(ip, ports, mac_ip=mac_ip))
    return 0


def _join(args) -> int:
    from hetlab.cluster import commands
    saved, head, ip, ports = _saved_pair(args, "mac", "--head DESKTOP_IP (the desktop's LAN address)")
    if args.start:
        return commands.start(*commands.join_start(head, ip, ports))
    print_steps(commands.render_join(head, ip, ports, head_user=args.head_user,
                                     token="by hand" if args.head_wsl else "ssh"))
    return 0


def _wslconfig(args) -> int:
    from hetlab.windows import wsl
    path = wsl.wslconfig_path()
    if path is None:
        raise HetlabError("no Windows profile found from here: run `hetlab wslconfig` inside WSL (Ubuntu) "
                          "on the Windows desktop.")
    lacking = wsl.missing(path.read_text(errors="replace") if path.exists() else "")
    print_steps(wsl.wslconfig_text(path, lacking) if lacking else f"{path} has the course's settings: nothing to do")
    return 0


# --- notebooks 07 and 08: hetlab train ---

def parse_batch_sizes(text: str) -> str | list[int]:
    """``"auto"`` or ``"D:M"`` (the split: desktop's and mac's samples a step) → ``"auto"`` or ``[D, M]``."""
    if text == "auto":
        return text
    sizes = text.split(":")
    if len(sizes) != 2 or not all(s.isdigit() and int(s) > 0 for s in sizes):
        raise HetlabError(f"--batch-sizes {text!r}: use auto or two whole numbers ≥ 1, desktop:mac, e.g. 96:32.")
    return [int(s) for s in sizes]


def function_arg(text: str):
    """``--model MODULE:FUNCTION`` → that function, imported from this folder or the Python path."""
    import importlib
    module_name, _, function = text.partition(":")
    if not module_name or not function.isidentifier():
        raise HetlabError(f"--model {text!r}: use MODULE:FUNCTION, a function in MODULE.py of this folder.")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # noqa: BLE001 - the learner's module: any import error
        raise HetlabError(f"--model {text!r}: cannot import {module_name!r} ({type(e).__name__}: "
                          f"{' '.join(str(e).split())[:120]}): run hetlab train in the folder holding "
                          f"{module_name.replace('.', '/')}.py.") from None
    if not callable(getattr(module, function, None)):
        raise HetlabError(f"--model {text!r}: {module_name!r} has no {function!r}.")
    return getattr(module, function)


def writable_folder(flag: str, folder: str) -> None:
    """``folder`` made if missing, and a file written and deleted there: or one line, before anything slow."""
    import tempfile
    try:
        os.makedirs(folder, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".hetlab-"):
            pass
    except OSError as e:
        raise HetlabError(f"{flag} {folder}: cannot write there ({e.strerror}); give a folder you can write.") from None


def _resume_target(text: str, model=None):
    """``--resume FILE|DIR`` → (checkpoint path, its checked contents), read without Ray."""
    from pathlib import Path

    from hetlab.core.checkpoint import latest_checkpoint, load_checkpoint
    path = Path(text)
    if path.is_dir():
        path = latest_checkpoint(path)
        if path is None:
            raise HetlabError(f"--resume {text}: no step-*.pt checkpoint in that folder.")
    elif not path.is_file():
        raise HetlabError(f"--resume {text}: no such file or folder.")
    return path, load_checkpoint(path, model=model)


def check_train_args(args) -> dict:
    """Every check of ``hetlab train``'s arguments, before any Ray starts; returns the parsed options.
    A resumed run takes the checkpoint's seed and samples (another seed or size is another data
    order: not a resume)."""
    from hetlab import is_quick
    if args.mode not in CLI_MODES:
        raise HetlabError(f"--mode {args.mode!r}: use sync, async or local-sgd.")
    model = args.model
    if model not in MODEL_NAMES:
        if ":" not in model:
            raise HetlabError(f"--model {model!r}: use one of {', '.join(MODEL_NAMES)}, or your own "
                              f"network as MODULE:FUNCTION (a function returning an nn.Module).")
        from hetlab.core.models import as_factory
        model = as_factory(function_arg(model))
    sizes = parse_batch_sizes(args.batch_sizes)
    batch = sum(sizes) if sizes != "auto" else GLOBAL_BATCH
    seed, samples, resume = 0 if args.seed is None else args.seed, args.train_samples, None
    if args.resume:
        resume, ckpt = _resume_target(args.resume, None if isinstance(model, str) else model)
        kept = {"--seed": ckpt["options"]["seed"], "--train-samples": ckpt["data_len"]}
        for flag, given in (("--seed", args.seed), ("--train-samples", samples)):
            if given is not None and given != kept[flag]:
                raise HetlabError(f"{flag} {given}: the checkpoint {resume} was trained with {flag} {kept[flag]}; "
                                  f"give {flag} {kept[flag]} (or leave it out) to resume it, or start a fresh run "
                                  f"without --resume.")
        if args.steps <= ckpt["step"]:
            raise HetlabError(f"--steps {args.steps}: the checkpoint {resume} is at step {ckpt['step']} and "
                              f"--steps is the step to train until: give --steps greater than {ckpt['step']}.")
        seed, samples = kept["--seed"], kept["--train-samples"]
    samples = samples or (TRAIN_SAMPLES_QUICK if is_quick() else TRAIN_SAMPLES_FULL)
    for flag, value, low in (("--steps", args.steps, 1), ("--local-steps", args.local_steps, 1),
                             ("--train-samples", samples, batch)):
        if value < low:
            raise HetlabError(f"{flag} {value}: must be at least {low}.")
    if samples > 60000:
        raise HetlabError(f"--train-samples {samples}: MNIST has 60000 training samples.")
    if args.checkpoint_dir:   # made and tried now, not after a long run
        writable_folder("--checkpoint-dir", args.checkpoint_dir)
    return {"mode": CLI_MODES[args.mode], "batch_sizes": sizes, "model": model, "train_samples": samples,
            "seed": seed, "resume": resume}


def _train(args) -> int:
    opts = check_train_args(args)
    from hetlab.arithmetic.balance import auto_tune, format_split
    from hetlab.cluster.connecting import requested_address
    from hetlab.core.data import load_mnist
    from hetlab.pair import the_pair
    from hetlab.ps import ParameterServerTraining
    from hetlab.ps.records import cluster_samples_per_s
    requested = requested_address(args.address)  # --address, else HETLAB_ADDRESS / RAY_ADDRESS / the saved pair
    if requested.real:
        print(f"training on the cluster at {requested.address}")
    else:
        from hetlab.cluster.practice import display_name
        print(f"starting a practice cluster on this machine: {display_name('desktop')} + {display_name('mac')}")
    with the_pair(practice_slowdown=4.0, address=args.address) as pair:
        train, test = load_mnist("train"), load_mnist("test")
        if opts["train_samples"] < len(train):
            train = train.subset(opts["train_samples"], seed=opts["seed"])
        common = dict(checkpoint_dir=args.checkpoint_dir, checkpoint_every=CHECKPOINT_EVERY, progress=not args.quiet)
        if opts["resume"]:   # the checkpoint's mode, batch sizes and local steps
            own = {} if isinstance(opts["model"], str) else {"model": opts["model"]}
            run = ParameterServerTraining.resume(opts["resume"], pair.workers, train, **own, **common)
        else:
            run = ParameterServerTraining(pair.workers, train, model=opts["model"], mode=opts["mode"],
                                          local_steps=args.local_steps, seed=opts["seed"], **common)
        with run:
            if opts["resume"]:
                if args.quiet:   # (with progress on, the engine prints this line itself)
                    print(f"resumed from {opts['resume']} at step {run.step}")
            elif opts["batch_sizes"] == "auto":
                tuned = auto_tune(lambda sizes: run.measure(sizes, steps=2), GLOBAL_BATCH, 2, rounds=4)
                run.resplit(tuned.batch_sizes, "auto_tune")
                print(f"batch sizes auto (measured over {run.step} training steps): {tuned}")
            else:
                run.resplit(opts["batch_sizes"], "--batch-sizes")
            print(f"model {run.model_name} ({run.n_params:,} parameters); "
                  f"workers: {'; '.join(run.labels)}; batch {format_split(run.batch_sizes)}")
            records = run.run(max(0, args.steps - run.step))
            accuracy = run.evaluate(test)
            if args.checkpoint_dir:
                print(f"checkpoint: {run.save_checkpoint()}")
            print(f"{run.mode}: step {run.step}, {run.samples_seen} samples, "
                  f"{cluster_samples_per_s(records):.0f} samples/s, {run.bytes_per_sample:.0f} bytes/sample")
            print(f"final test accuracy: {accuracy:.4f}")
    return 0


# --- notebook 09: the search and the report; README "Check a real NVIDIA GPU" ---

def _search(args) -> int:
    if args.slowdown is not None and not 1 <= args.slowdown < float("inf"):  # before Ray and torch load
        raise HetlabError(f"--slowdown {args.slowdown:g}: give X ≥ 1, the mac's simulated slowdown (1 = none).")
    if args.at_once is not None and args.at_once < 1:
        raise HetlabError(f"--at-once {args.at_once}: give trials at once per device, at least 1.")
    from hetlab import search
    from hetlab.pair import the_pair
    batch = max(search.SPACE["batch_size"])
    if args.train_samples < batch:
        raise HetlabError(f"--train-samples {args.train_samples}: give at least {batch}, the largest batch tried.")
    val_samples = max(200, args.train_samples // 5)
    search.check_numbers(args.trials, args.epochs, args.budget, args.max_failures, args.roles,  # before Ray
                         train_samples=args.train_samples, val_samples=val_samples)
    with the_pair(slowdown=args.slowdown, address=args.address) as pair:
        print(pair)
        result = search.search(None, args.trials, roles=args.roles, epochs=args.epochs,
                               train_samples=args.train_samples, val_samples=val_samples,
                               slowdowns={w.role: w.slowdown for w in pair.workers},
                               time_budget_s=args.budget, seed=args.seed, max_failures=args.max_failures,
                               packing=None if args.at_once is None else dict.fromkeys(args.roles, args.at_once))
        print(result)
        print(result.best_line())
        print(f"results: {result.folder}")
    return 0


def _report(args) -> int:
    from hetlab.views import report
    page = report.write(None, args.measured)   # into the figures' folder: measured/report
    print(f"wrote {page} and {page.with_suffix('.html').name} (the one file to send)")
    print("write your answers in report.md, then run `hetlab report` again before sending report.html")
    if not args.check:
        return 0
    gaps = report.missing(page.read_text(encoding="utf-8"), report.source_folder(args.measured))
    print(f"still missing ({len(gaps)}):" if gaps else "nothing missing: report.html is ready to send")
    for line in gaps:
        print(f"  - {line}")
    return 1 if gaps else 0


def _gpu_check(args) -> int:
    from hetlab import is_quick
    from hetlab.tools import gpucheck
    result = gpucheck.run(args.only, quick=args.quick or is_quick())   # an unknown name: one line, before CUDA's check
    return 0 if result["passed"] else 1


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser with every subcommand."""
    from hetlab import is_quick
    quick = is_quick()
    parser = argparse.ArgumentParser(prog="hetlab", description="Train one model across unlike machines.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("doctor", help="check this machine (and the head) before joining a cluster")
    p.add_argument("--head", metavar="ADDRESS", help="head's IP:PORT, e.g. 192.168.1.10:6379")
    p.set_defaults(run=_doctor)

    p = sub.add_parser("head", help="print (or --start: run) the commands that start the head")
    p.add_argument("--ip", help="this machine's LAN IP (default: the saved pair's)")
    p.add_argument("--mac-ip", help="the Mac's LAN IP, the one address the firewall admits (default: the saved pair's)")
    p.set_defaults(run=_head)

    p = sub.add_parser("join", help="print (or --start: run) the commands that join the Mac to the head")
    p.add_argument("--head", help="the head's LAN IP (default: the saved pair's)")
    p.add_argument("--ip", help="this machine's LAN IP (default: the saved pair's)")
    p.add_argument("--head-user", help="your user name on the head, for the SSH line that fetches the token")
    p.add_argument("--head-wsl", action="store_true", help="the head runs inside WSL: the token is typed, not fetched")
    p.set_defaults(run=_join)
    for p in (sub.choices["head"], sub.choices["join"]):
        p.add_argument("--port", type=int, default=None, help=f"head's GCS port (default {Ports.gcs}, or the saved pair's)")
        p.add_argument("--start", action="store_true", help="day two: run this machine's `ray start` line "
                       "instead of printing the steps (no addresses given: the saved pair's)")

    p = sub.add_parser("wslconfig", help="inside WSL: what Windows' .wslconfig lacks, and how to add it")
    p.set_defaults(run=_wslconfig)

    p = sub.add_parser("train", help="train MNIST across the desktop and the Mac, headless",
                       description="Train with hetlab's parameter server, one worker per machine, and print "
                       "progress and the test accuracy. Without --address a practice cluster starts here, "
                       "where the mac is a simulated 4× slower device (docs/terminal.md).")
    p.add_argument("--address", metavar="IP:PORT", help="head of a running hetlab cluster (default: "
                   "HETLAB_ADDRESS, RAY_ADDRESS or the saved pair, else a practice cluster)")
    p.add_argument("--steps", type=int, default=40 if quick else 200, metavar="N",
                   help="train until server step N; local-sgd: round N (default %(default)s)")
    p.add_argument("--batch-sizes", default="auto", metavar="auto|D:M", help="the split, desktop:mac "
                   f"samples a step, e.g. 96:32, or auto (tuned for a global batch of {GLOBAL_BATCH}; default)")
    p.add_argument("--mode", default="sync", metavar="sync|async|local-sgd", help="sync steps, async updates or local SGD (default sync)")
    p.add_argument("--local-steps", type=int, default=8, metavar="H", help="local-sgd: steps between exchanges")
    p.add_argument("--train-samples", type=int, metavar="N", help="the first N of a fixed shuffle of MNIST "
                   f"(default {TRAIN_SAMPLES_QUICK if quick else TRAIN_SAMPLES_FULL}; with --resume: the checkpoint's)")
    p.add_argument("--model", default="small", metavar="NAME|MODULE:FUNCTION",
                   help="small, classic, or your function returning an nn.Module")
    p.add_argument("--seed", type=int, help="shuffle and initial weights (default 0; with --resume: the checkpoint's)")
    p.add_argument("--checkpoint-dir", metavar="DIR", help=f"save a checkpoint here every {CHECKPOINT_EVERY} steps and at the end")
    p.add_argument("--resume", metavar="FILE|DIR", help="continue from a checkpoint, or the newest in DIR")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(run=_train)

    p = sub.add_parser("search", help="search hyperparameters on the desktop and the Mac at once (Ray Tune)",
                       description="Notebook 09's search (Ray Tune, ASHA), each trial on one machine's device; "
                       "prints the trials and the best configuration. Without --address a practice cluster starts here.")
    p.add_argument("--address", metavar="IP:PORT", help="head of a running hetlab cluster (default as hetlab train's)")
    where = p.add_mutually_exclusive_group()
    for flag, roles in (("--pair", ("desktop", "mac")), ("--desktop-only", ("desktop",)), ("--mac-only", ("mac",))):
        where.add_argument(flag, dest="roles", action="store_const", const=roles, help=f"trials on {' and '.join(roles)}")
    p.set_defaults(roles=("desktop", "mac"))
    p.add_argument("--trials", type=int, default=4 if quick else 16, metavar="N", help="configurations (default %(default)s)")
    p.add_argument("--epochs", type=int, default=2 if quick else 4, metavar="E", help="most epochs a trial (default %(default)s)")
    p.add_argument("--train-samples", type=int, default=1500 if quick else 10000, metavar="N",
                   help="MNIST samples a trial (default %(default)s)")
    p.add_argument("--budget", type=float, metavar="SECONDS", help="stop the search after this many seconds")
    p.add_argument("--at-once", type=int, metavar="K", help="trials at once on each device (default: 2 per GPU, else 1)")
    p.add_argument("--max-failures", type=int, default=1, metavar="N", help="retries of a failed trial (default 1)")
    p.add_argument("--slowdown", type=float, metavar="X", help="the mac a simulated X× slower machine (practice: 4)")
    p.add_argument("--seed", type=int, default=0, help="seed of the configurations (default 0)")
    p.set_defaults(run=_search)

    p = sub.add_parser("gpu-check", help="check what notebooks 01 and 02 claim about CUDA on your NVIDIA card")
    p.add_argument("--quick", action="store_true", help="fewer repeats and a shorter sweep")
    p.add_argument("--only", metavar="NAME[,NAME]", help=f"run only these checks: {', '.join(GPU_CHECK_NAMES)}")
    p.set_defaults(run=_gpu_check)

    p = sub.add_parser("report", help="write one Markdown page (and its HTML) of what your two machines did")
    p.add_argument("--measured", metavar="FOLDER", help="the notebooks' figures, and the page's folder under "
                   "them (default: HETLAB_MEASURED, else measured/)")
    p.add_argument("--check", action="store_true", help="then list what is still missing (exit status 1 while anything is)")
    p.set_defaults(run=_report)
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
