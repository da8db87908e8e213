"""``hetlab train`` (notebooks 07 and 08): headless heterogeneous training through the parameter
server, one worker on the desktop and one on the Mac (or a practice cluster here).

Its arguments, and every check of them (``_check_train_args``: ratio, mode, your own model,
data and loss as ``MODULE:FUNCTION``, a checkpoint to resume) done before any Ray starts, so a
bad one is one line within seconds; then ``_train`` runs it.
"""
from __future__ import annotations

import os
import sys

from hetlab.errors import HetlabError
from hetlab.tools.cli.base import subcommand
from hetlab.vocab import CLI_MODES, MODEL_NAMES, TRANSFERS

TRAIN_EXAMPLES = """  hetlab train --steps 200                       practice cluster here: desktop + simulated mac
  hetlab train --ratio 3:1 --mode local-sgd --local-steps 8 --transfer fp16
  hetlab train --checkpoint-dir ckpt --checkpoint-every 50
  hetlab train --steps 400 --checkpoint-dir ckpt --resume ckpt    continue to step 400
  hetlab train --address 192.168.1.10:6379      the real desktop + Mac cluster (notebook 04)"""


TRAIN_SAMPLES_QUICK, TRAIN_SAMPLES_FULL = 10000, 60000  # --train-samples default (quick mode / full)


def add_train(sub) -> None:
    from hetlab import is_quick
    quick = is_quick()
    p = subcommand(
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
        from hetlab.core.models import as_loss
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
    if args.checkpoint_dir:
        writable_folder("--checkpoint-dir", args.checkpoint_dir)
    return {"mode": CLI_MODES[args.mode], "ratio": parse_ratio(args.ratio), "resume": resume, "model": model,
            "loss": loss, "data": data,
            "seed": seed, "train_samples": samples,
            "every": every if every is not None else (50 if args.checkpoint_dir else 0)}


def writable_folder(flag: str, folder: str) -> None:
    """``folder`` made if missing, and a file written and deleted there: or one line, before anything slow."""
    import tempfile
    try:
        os.makedirs(folder, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".hetlab-"):
            pass
    except OSError as e:
        raise HetlabError(f"{flag} {folder}: cannot write there ({e.strerror}); give a folder you can write.") from None


def model_arg(text: str):
    """``--model``: a built-in name (kept as the name), or ``module:function`` → that function,
    imported from this folder or the Python path and checked (``hetlab.core.models.as_factory``)."""
    if text in MODEL_NAMES:
        return text
    module_name, _, function = text.partition(":")
    if not module_name or not function.isidentifier():
        raise HetlabError(f"--model {text!r}: use one of {', '.join(MODEL_NAMES)}, or your own "
                          f"network as MODULE:FUNCTION (a function returning an nn.Module).")
    from hetlab.core.models import as_factory
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
    from hetlab.core.data import as_tensors
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

    from hetlab.core.checkpoint import latest_checkpoint, load_checkpoint
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
    kept = {"seed": ckpt["options"]["seed"], "data_len": ckpt.get("data_len")}  # hetlab.ps.saving
    for flag, given, key in (("--seed", seed, "seed"), ("--train-samples", samples, "data_len")):
        saved = kept[key]
        if given is not None and saved is not None and given != saved:
            raise HetlabError(f"{flag} {given}: the checkpoint {resume} was trained with {flag} {saved}; "
                              f"give {flag} {saved} (or leave it out) to resume it, or start a fresh run "
                              f"without --resume.")
    return (kept["seed"] if seed is None else seed,
            (kept["data_len"] or TRAIN_SAMPLES_FULL) if samples is None else samples)


def _train(args) -> int:
    opts = _check_train_args(args)
    from hetlab.arithmetic.balance import auto_tune, format_split, split_batch
    from hetlab.core.data import load_mnist
    from hetlab.cluster.connecting import requested_address
    from hetlab.pair import the_pair
    from hetlab.ps import ParameterServerTraining
    from hetlab.ps.hooks import AutoCheckpoint, Progress
    from hetlab.ps.records import cluster_samples_per_s
    requested = requested_address(args.address)  # --address, else HETLAB_ADDRESS / RAY_ADDRESS / the saved pair
    if requested.real:
        print(f"training on the cluster at {requested.address}")
    else:
        from hetlab.cluster.practice import display_name
        print(f"starting a practice cluster on this machine: {display_name('desktop')} + {display_name('mac')}")
    with the_pair(practice_slowdown=4.0, slowdown=args.slowdown, address=args.address) as pair:
        workers = pair.workers
        if opts["data"] is not None:
            train, test = opts["data"]
        else:
            train, test = load_mnist("train"), load_mnist("test")
            if opts["train_samples"] < len(train):
                train = train.subset(opts["train_samples"], seed=opts["seed"])
        common = dict(checkpoint_dir=args.checkpoint_dir, progress=not args.quiet)
        hooks = [] if args.quiet else [Progress()]                 # what this command wants around its steps
        if args.checkpoint_dir and opts["every"]:
            hooks.append(AutoCheckpoint(args.checkpoint_dir, opts["every"]))
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
                print(f"batch sizes from the checkpoint: {format_split(run.batch_sizes)}")
            elif opts["ratio"] == "auto":
                tuned = auto_tune(lambda sizes: run.measure(sizes, steps=2), args.global_batch, 2, rounds=4)
                run.resplit(tuned.batch_sizes, "auto_tune")
                print(f"ratio auto (measured over {run.step} training steps): {tuned}")
            else:
                run.resplit(split_batch(args.global_batch, opts["ratio"]), "ratio")
            print(f"model {run.model_name} ({run.n_params:,} parameters); "
                  f"workers: {'; '.join(run.labels)}; batch {format_split(run.batch_sizes)}")
            records = run.run(max(0, args.steps - run.step), hooks=hooks)
            accuracy = run.evaluate(test)
            if args.checkpoint_dir:
                print(f"checkpoint: {run.save_checkpoint()}")
            print(f"{run.mode}: step {run.step}, {run.samples_seen} samples, "
                  f"{cluster_samples_per_s(records):.0f} samples/s, {run.bytes_per_sample:.0f} bytes/sample")
            print(f"final test accuracy: {accuracy:.4f}")
    return 0
