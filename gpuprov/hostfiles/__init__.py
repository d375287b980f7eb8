"""One module per file gpuprov manages on a host, each with a typed model of that file and both
directions: ``render`` what the plan wants (the deploy writes it) and ``check`` what a host has
against the plan (verify reports the findings). Pure core: no pyinfra, paramiko or pynvml.

Every module follows the same shape::

    paths(plan) -> Wanted                       # the files and globs the probe must read
    render(plan, ...) -> str                    # the text the deploy writes
    check(plan, files) -> list[Finding]         # files: {path: text | None} as the probe read them
"""
