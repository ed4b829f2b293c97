"""`speedtui` command line: the console, `keygen`, and the pipeline's `analyze`/`simulate-traces`."""

from __future__ import annotations

import argparse
import os
import stat
import sys
from pathlib import Path

from speed_runtime.cli.common import ShowVersion
from speed_runtime.core.visible import visible

EXIT_USAGE = 2


def _fail(msg: str) -> int:
    print(f"speedtui: {visible(msg)}", file=sys.stderr)
    return EXIT_USAGE


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="speedtui", description="SPEED operations console")
    p.add_argument("--version", action=ShowVersion)
    p.add_argument("--dir", type=Path, help="communication directory ROOT (default: /dev/shm/speed, "
                                            "else the user runtime directory)")
    p.add_argument("--key", type=Path, help="key file (default: $SPEED_KEY, else speed.key in the config directory)")
    p.add_argument("--operator-key", type=Path, metavar="PATH",
                   help="operator key file for nodes started with `speed node --operator` (default: "
                        "\"operator_key\" in the config file, else $SPEED_OPERATOR_KEY, else "
                        "~/.config/speed/operator.key if present)")
    p.add_argument("--readonly", action="store_true", help="watch only: every action is disabled")
    p.add_argument("--theme", help="speed-dark, speed-light, speed-high-contrast (or dark/light/high-contrast)")
    p.add_argument("--demo", action="store_true", help="start a temporary demo environment and watch it")
    sub = p.add_subparsers(dest="command")
    kg = sub.add_parser("keygen", help="create a new key file (mode 0600)")
    kg.add_argument("path", nargs="?", type=Path, help="where (default: the --key default)")
    try:
        from .pipeline.commands import add_subcommands
    except Exception:  # noqa: BLE001 - pyspark or the pipeline missing: the console still works
        add_subcommands = None
    if add_subcommands is not None:
        add_subcommands(sub)
    return p


def check_root(root: Path) -> str | None:
    """One sentence if ``root`` cannot be watched, else None (contract §1)."""
    try:
        st = os.lstat(root)
    except FileNotFoundError:
        return f"directory {root} does not exist (start a node with `speed node --dir {root} ...` or use --demo)"
    except OSError as exc:
        return f"directory {root} cannot be read: {exc.strerror}"
    if stat.S_ISLNK(st.st_mode):
        return f"directory {root} is a symbolic link; pass the real directory"
    if not stat.S_ISDIR(st.st_mode):
        return f"{root} is not a directory"
    if st.st_uid != os.geteuid():
        return f"directory {root} is owned by another user (uid {st.st_uid})"
    if st.st_mode & 0o002:
        return f"directory {root} is writable by others; run `chmod 700 {root}`"
    if not os.access(root, os.R_OK | os.X_OK):
        return f"directory {root} is not readable"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from .services import runtime as rt
    from .paths import Paths, default_key, default_root

    paths = Paths.default()
    if args.command == "keygen":
        path = args.path or default_key(paths)
        try:
            rt.generate_key_file(path)
            info = rt.load_key(path)
        except rt.KeyProblem as exc:
            return _fail(str(exc))
        print(f"created {path} (fingerprint {info.fingerprint})")
        return 0
    if args.command is not None:
        func = getattr(args, "func", None)
        if func is None:
            return _fail(f"{args.command}: no handler")
        rc = func(args)
        return int(rc or 0)

    demo = None
    if args.demo:
        from .environments.demo import DemoEnvironment

        demo = DemoEnvironment()
        try:
            print("speedtui: starting the demo environment…", file=sys.stderr)
            demo.start()
        except Exception as exc:  # noqa: BLE001
            demo.stop()
            return _fail(f"the demo could not start: {str(exc).splitlines()[0] if str(exc) else exc!r}")
        root, key_path = demo.root, demo.key_path
    else:
        root = args.dir or default_root()
        key_path = args.key or default_key(paths)
        problem = check_root(root)
        if problem:
            return _fail(problem)
    try:
        key = rt.load_key(key_path)
    except rt.KeyProblem as exc:
        if demo:
            demo.stop()
        return _fail(str(exc))
    from .ui.app import make_app

    from .services.config import Config
    from .services.operator import resolve_operator_key

    config = Config.load(paths.config_file)
    operator = resolve_operator_key(args.operator_key, config.operator_key)
    app = make_app(root, key, readonly=args.readonly, theme=args.theme, paths=paths, demo=demo, config=config,
                   operator=operator)
    try:
        app.run()
    finally:
        app.shutdown()
    # an exception that ended the app was shown by Textual as it closed; scripts see a failure
    return app.return_code or 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
