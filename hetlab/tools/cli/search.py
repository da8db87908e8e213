"""``hetlab search`` (notebook 09): the hyperparameter search of ``hetlab.search.driver`` from a terminal,
on the practice cluster or your pair, printing the table of trials and the best configuration.
``hetlab.tools.cli.app`` lists ``add_search`` among its subcommands; building the parser loads no Ray."""
from __future__ import annotations

import argparse


SEARCH_EXAMPLES = """  hetlab search --trials 8                       practice cluster here: desktop + simulated mac
  hetlab search --desktop-only --trials 8        the same search on the desktop alone
  hetlab search --budget 300 --trials 40         as many of 40 configurations as fit in 5 minutes
  hetlab search --mac-only --trials 8            the same search on the Mac alone
  hetlab search --address 192.168.1.10:6379 --storage /mnt/shared/hetlab   your pair, a shared folder
  hetlab search --storage s3://my-bucket/hetlab --max-failures 2            results in a bucket, 2 retries"""


def add_search(sub) -> None:
    from hetlab import is_quick
    quick = is_quick()
    p = sub.add_parser(
        "search", help="search hyperparameters on the desktop and the Mac at once (Ray Tune)",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog="examples:\n" + SEARCH_EXAMPLES,
        description=
        "Run a hyperparameter search of the MNIST CNN (learning rate, batch size, width,\n"
        "optimizer) with Ray Tune and ASHA, each trial on one machine's own device, and print\n"
        "the table of trials and the best configuration. Without --address a practice cluster\n"
        "starts on this machine, where the mac is a simulated slower device.")
    p.add_argument("--address", metavar="IP:PORT", help="head of a running hetlab cluster (default: "
                   "HETLAB_ADDRESS or RAY_ADDRESS if set, else a practice cluster on this machine)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--pair", dest="roles", action="store_const", const=("desktop", "mac"),
                       help="trials on both machines (the default)")
    where.add_argument("--desktop-only", dest="roles", action="store_const", const=("desktop",),
                       help="trials on the desktop alone")
    where.add_argument("--mac-only", dest="roles", action="store_const", const=("mac",),
                       help="trials on the Mac alone")
    p.set_defaults(roles=("desktop", "mac"))
    p.add_argument("--trials", type=int, default=4 if quick else 16, metavar="N",
                   help="configurations to try (default %(default)s)")
    p.add_argument("--epochs", type=int, default=2 if quick else 4, metavar="E",
                   help="most epochs per trial; ASHA stops poor ones earlier (default %(default)s)")
    p.add_argument("--train-samples", type=int, default=1500 if quick else 10000, metavar="N",
                   help="MNIST training samples per trial (default %(default)s)")
    p.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                   help="stop the search after this many seconds (default: when every trial is done)")
    p.add_argument("--storage", default=None, metavar="FOLDER_OR_URI",
                   help="results: a folder every machine sees, or a URI such as s3://bucket/path (default: "
                   "a temp folder here; checkpoints wait beside this process either way)")
    p.add_argument("--at-once", type=int, default=None, metavar="K",
                   help="trials at once on each machine's device (default: measured)")
    p.add_argument("--max-failures", type=int, default=1, metavar="N",
                   help="retries of a failed trial, e.g. when its machine is lost (default %(default)s)")
    p.add_argument("--slowdown", type=float, default=None, metavar="X",
                   help="make the mac a simulated X× slower machine, X ≥ 1 (practice default 4)")
    p.add_argument("--seed", type=int, default=0, help="seed of the configurations (default 0)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(run=_search)


def _search(args) -> int:
    from hetlab.errors import HetlabError
    if args.slowdown is not None and not 1 <= args.slowdown < float("inf"):  # before Ray and torch load
        raise HetlabError(f"--slowdown {args.slowdown:g}: give X ≥ 1, the mac's simulated slowdown (1 = none).")
    if args.at_once is not None and args.at_once < 1:
        raise HetlabError(f"--at-once {args.at_once}: give trials at once per device, at least 1.")
    from hetlab import search
    from hetlab.pair import the_pair
    batch = max(search.SPACE["batch_size"])
    if args.train_samples < batch:
        raise HetlabError(f"--train-samples {args.train_samples}: give at least {batch}, the largest batch tried.")
    search.check_numbers(args.trials, args.epochs, 1, args.budget, args.max_failures, args.roles,  # before Ray
                         train_samples=args.train_samples, val_samples=max(200, args.train_samples // 5))
    if args.storage is not None:
        search.storage.open_storage(args.storage)  # writable, readable, deletable from here: before any cluster
    with the_pair(slowdown=args.slowdown, address=args.address) as pair:
        print(pair)
        result = search.search(None, args.trials, roles=args.roles, epochs=args.epochs,
                               train_samples=args.train_samples, val_samples=max(200, args.train_samples // 5),
                               slowdowns={w.role: w.slowdown for w in pair.workers}, storage_path=args.storage,
                               time_budget_s=args.budget, seed=args.seed, max_failures=args.max_failures,
                               packing=None if args.at_once is None else dict.fromkeys(args.roles, args.at_once),
                               progress=not args.quiet)
        print(result)
        print(result.best_line())
        print(f"results: {result.folder}")
    return 0
