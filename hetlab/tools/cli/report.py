"""``hetlab report``: the learner's hand-in (``hetlab.views.report``), one Markdown page with its plots,
an HTML file with them inlined and the figures as CSV, written from the figures notebooks 02, 05, 06, 08 and 09 saved. Building the parser loads no Ray."""
from __future__ import annotations


def _add_report(sub) -> None:
    p = sub.add_parser("report", help="write one Markdown page (with plots) of what your two machines did",
                       description="Write report.md and its PNG plots from the figures the notebooks saved in "
                                   "measured/: each figure labelled measured (machine, date), estimated or simulated.")
    p.add_argument("--measured", metavar="FOLDER", default=None,
                   help="where the notebooks saved their figures (default: HETLAB_MEASURED, else measured/)")
    p.add_argument("--out", metavar="FOLDER", default=None, help="where to write the page (default: measured/report)")
    p.add_argument("--names", action="store_true",
                   help="keep the machines' host names (default: they appear as 'desktop' and 'mac')")
    p.set_defaults(run=_report)


def _report(args) -> int:
    from hetlab.views import report
    page = report.write(args.out, args.measured, names=args.names)
    print(f"wrote {page}, {page.with_suffix('.html').name} (plots inlined: the one file to send) and figures.csv")
    return 0
