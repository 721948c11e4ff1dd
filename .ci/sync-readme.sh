#!/bin/sh
# Rewrites README.md's flag reference from the binaries' --help output
# (launcher.Usage is the source; TestREADMEFlagReference checks the result).
set -eu
cd "$(dirname "$0")/.."
make -s build >/dev/null
python3 - <<'PY'
import subprocess, re
usage = subprocess.run(["bin/launcher", "-h"], capture_output=True, text=True).stdout
agent = subprocess.run(["bin/agent", "-h"], capture_output=True, text=True).stderr
s = open("README.md").read()
s = re.sub(r"(### launcher\n\n```\n).*?(```\n\n### agent\n\n```\n).*?(```\n)",
           lambda m: m.group(1) + usage + m.group(2) + agent + m.group(3), s, flags=re.S)
open("README.md", "w").write(s)
PY
