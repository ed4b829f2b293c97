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
    p.add_argument("--dir", type=Path, help="communication directory ROOT (default: $SPEED_DIR, else "
                                            "/dev/shm/speed, else the user runtime directory)")
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
    from .paths import Paths, default_key

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

    with EndOnSignals() as ending:
        try:
            return _console(args, paths, rt, ending)
        except SignalEnded as ended:
            return 128 + ended.signum


class SignalEnded(BaseException):
    """A signal arrived before the app ran (or after it ended): unwind, cleaning up as we go."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class EndOnSignals:
    """SIGHUP (the terminal went away: `tmux kill-session`), SIGTERM and SIGINT end the console as
    `q` does: the app exits through its loop, so Textual restores the terminal, and the caller's
    cleanup stops the console's own nodes and removes the demo. Without this the default actions
    killed the process on the spot and left both behind. A second signal while ending stops waiting
    for the app (the cleanup still runs)."""

    SIGNALS = ("SIGHUP", "SIGTERM", "SIGINT")

    def __init__(self) -> None:
        self.app = None
        self.ending = False  # a signal arrived already: the next one stops waiting for the app
        self._previous: dict[int, object] = {}

    def __enter__(self) -> "EndOnSignals":
        import signal

        for name in self.SIGNALS:
            sig = getattr(signal, name)
            self._previous[sig] = signal.signal(sig, self._arrived)
        return self

    def __exit__(self, *exc: object) -> None:
        import signal

        for sig, previous in self._previous.items():
            signal.signal(sig, previous)

    def _arrived(self, signum: int, _frame: object) -> None:
        import asyncio

        first, self.ending = not self.ending, True
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if first and self.app is not None and loop is not None:
            # the handler runs between two bytecodes of the loop's own thread: ask the loop, which
            # wakes through its self-pipe, rather than touching the app here
            loop.call_soon_threadsafe(self.app.exit, None, 128 + signum)
            return
        raise SignalEnded(signum)


def _console(args: argparse.Namespace, paths, rt, ending: EndOnSignals) -> int:
    demo = app = None
    try:
        if args.demo:
            from .environments.demo import DemoEnvironment

            demo = DemoEnvironment()
            try:
                print("speedtui: starting the demo environment…", file=sys.stderr)
                demo.start()
            except Exception as exc:  # noqa: BLE001
                return _fail(f"the demo could not start: {str(exc).splitlines()[0] if str(exc) else exc!r}")
            root, key_path = demo.root, demo.key_path
        else:
            from .paths import default_key, default_root

            root = args.dir or default_root()
            key_path = args.key or default_key(paths)
            problem = check_root(root)
            if problem:
                return _fail(problem)
        try:
            key = rt.load_key(key_path)
        except rt.KeyProblem as exc:
            return _fail(str(exc))
        from .ui.app import make_app

        from .services.config import Config
        from .services.operator import resolve_operator_key

        config = Config.load(paths.config_file)
        operator = resolve_operator_key(args.operator_key, config.operator_key)
        app = make_app(root, key, readonly=args.readonly, theme=args.theme, paths=paths, demo=demo,
                       config=config, operator=operator)
        ending.app = app
        app.run()
        # an exception that ended the app was shown by Textual as it closed; scripts see a failure
        return app.return_code or 0
    finally:
        if app is not None:
            app.shutdown()          # stops the demo too
        elif demo is not None:
            demo.stop()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
