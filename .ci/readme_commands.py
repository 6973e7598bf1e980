"""Print the README's Quick start commands, one per line: the main job first, then the tests.

CI runs exactly these, so the README and CI cannot drift apart."""
import pathlib
import re
import sys

text = pathlib.Path(__file__).resolve().parent.parent.joinpath("README.md").read_text()
quick = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
commands = [block.strip() for block in re.findall(r"```bash\n(.*?)```", quick, flags=re.S)]
if len(commands) != 2 or any("\n" in c for c in commands):
    sys.exit(f"README's Quick start must hold exactly two one-line bash blocks, found {commands!r}")
print("\n".join(commands))
