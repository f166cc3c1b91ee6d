"""A compiled test script of the JavaScript client in one ``node`` process, no broker:
a JSON case a line in, a JSON answer a line out (``make js-client`` builds the scripts)."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["JS_DIR", "NodeScript", "node_script"]

#: The JavaScript client's folder; its compiled test scripts are under ``dist/test``.
JS_DIR = Path(__file__).resolve().parents[2] / "clients" / "js"


class NodeScript:
    """One compiled script of ``clients/js/test`` running in ``node``.

    Text crosses as UTF-8 with lone surrogates kept (``surrogatepass``), so that a case
    can carry what a JavaScript string can and Python's UTF-8 cannot. An answer with
    ``crash`` (the script met an error it does not expect: a bug) fails the test."""

    def __init__(self, name: str) -> None:
        node = shutil.which("node")
        assert node is not None, "node (v18+) is needed: install nodejs"
        self.name = name
        script = JS_DIR / "dist" / "test" / name
        assert script.exists(), f"{script} is missing: run `make js-client` (npm ci, tsc)"
        self.process = subprocess.Popen(
            [node, str(script)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            errors="surrogatepass",
            cwd=JS_DIR,
        )

    def ask(self, case: dict[str, Any]) -> dict[str, Any]:
        """Send ``case`` (JSON has no NaN or infinities: write those as the script reads
        them) and return the script's answer."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(case, allow_nan=False) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        assert line, f"{self.name} stopped"
        answer: dict[str, Any] = json.loads(line)
        assert "crash" not in answer, answer["crash"]
        return answer

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=10)


@contextmanager
def node_script(name: str) -> Iterator[NodeScript]:
    """:class:`NodeScript` ``name`` (e.g. ``"requests.js"``), closed on leaving."""
    script = NodeScript(name)
    try:
        yield script
    finally:
        script.close()
