"""The code blocks of the documentation's MyST pages, and what the docs tests do with them."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).parents[2]
DOCS = ROOT / "docs"
EXAMPLES = DOCS / "examples"

SHELL = {"bash", "sh", "shell", "console", "zsh", "shell-session"}
PYTHON = {"python", "py", "python3", "pycon", "ipython", "ipython3"}
OUTPUT = {"text"}  # printed output and log lines, not code to run
CODE_DIRECTIVES = {"code-block", "code", "sourcecode"}
# Shell commands that need the network or Google Cloud, so no test can run them here.
OFFLINE_IMPOSSIBLE = ("pip install ", "uv pip install ", "gcloud ")

_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
_OPTION = re.compile(r"^:(?P<name>[\w-]+):\s*(?P<value>.*)$")


@dataclass
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    info: str
    options: dict[str, str] = field(default_factory=dict)
    body: str = ""

    @property
    def directive(self) -> str | None:
        """``literalinclude`` for ``{literalinclude} path``; None for a plain fenced block."""
        return self.info[1 : self.info.index("}")] if self.info.startswith("{") else None

    @property
    def argument(self) -> str:
        return self.info.partition("}")[2].strip() if self.directive else ""

    @property
    def language(self) -> str:
        """The language of a plain fence or a code-block directive ("" if none given)."""
        if self.directive is None:
            return self.info.split()[0].lower() if self.info.split() else ""
        if self.directive in CODE_DIRECTIVES:
            return self.argument.split()[0].lower() if self.argument else ""
        return self.options.get("language", "").lower()

    @property
    def runnable(self) -> bool:
        return "runnable" in self.options.get("class", "").split()

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(DOCS)}:{self.line}"

    def include_target(self) -> Path:
        """The file a literalinclude shows (a leading / is the docs directory)."""
        argument = self.argument
        path = DOCS / argument[1:] if argument.startswith("/") else self.page.parent / argument
        return path.resolve()


def pages() -> list[Path]:
    return sorted(path for path in DOCS.rglob("*.md") if "_build" not in path.parts and EXAMPLES not in path.parents)


def blocks(page: Path) -> list[Block]:
    """Every fenced block of a page, outermost only, with its directive options split off."""
    found: list[Block] = []
    lines = page.read_text().splitlines()
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        fence, indent = opening["fence"], len(opening["indent"])
        block = Block(page, i + 1, opening["info"].strip())
        body: list[str] = []
        i += 1
        while i < len(lines):
            closing = _FENCE.match(lines[i])
            if closing and closing["fence"][0] == fence[0] and len(closing["fence"]) >= len(fence):
                if not closing["info"].strip():
                    break
            body.append(lines[i][indent:] if lines[i][:indent].strip() == "" else lines[i])
            i += 1
        i += 1
        if block.directive is not None:
            while body and _OPTION.match(body[0]):
                option = _OPTION.match(body[0])
                assert option is not None
                block.options[option["name"]] = option["value"].strip().strip('"')
                body.pop(0)
        block.body = "\n".join(body).strip("\n")
        found.append(block)
    return found


def all_blocks() -> list[Block]:
    return [block for page in pages() for block in blocks(page)]


def shell_commands(text: str) -> list[str]:
    """The commands of a shell block: continuation lines joined, comments and blanks dropped."""
    commands: list[str] = []
    current = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        current += line[:-1] + " " if line.endswith("\\") else line
        if not line.endswith("\\"):
            commands.append(current.strip())
            current = ""
    if current:
        commands.append(current.strip())
    return commands


def runnable_script(page: Path) -> str:
    """The runnable shell blocks of a page, in order: what a reader types, one session."""
    return "\n\n".join(block.body for block in blocks(page) if block.runnable)
