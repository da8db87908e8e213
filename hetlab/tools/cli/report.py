"""``hetlab report``: the learner's hand-in (``hetlab.views.report``), one Markdown page and the same
page as one HTML file, written from the figures notebooks 01–09 saved;
``--check`` lists what is still missing before handing in. Building the parser loads no Ray."""
from __future__ import annotations


def add_report(sub) -> None:
    p = sub.add_parser("report", help="write one Markdown page of what your two machines did",
                       description="Write report.md and report.html from the figures the notebooks saved in "
                                   "measured/: each figure labelled measured (machine, date), estimated or simulated.")
    p.add_argument("--measured", metavar="FOLDER", default=None,
                   help="where the notebooks saved their figures (default: HETLAB_MEASURED, else measured/)")
    p.add_argument("--out", metavar="FOLDER", default=None, help="where to write the page (default: measured/report)")
    p.add_argument("--check", action="store_true",
                   help="write the page again, then list what is still missing: sections not measured, "
                        "questions unanswered, exercises not passed (exit status 1 while anything is)")
    p.set_defaults(run=_report)


def _report(args) -> int:
    from hetlab.views import report
    page = report.write(args.out, args.measured)
    print(f"wrote {page} and {page.with_suffix('.html').name} (the one file to send)")
    print("write your answers in report.md, then run `hetlab report` again before sending report.html")
    if not args.check:
        return 0
    gaps = report.missing(page.read_text(encoding="utf-8"), report.source_folder(args.measured))
    print(f"still missing ({len(gaps)}):" if gaps else "nothing missing: report.html is ready to send")
    for line in gaps:
        print(f"  - {line}")
    return 1 if gaps else 0
