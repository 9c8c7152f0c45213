"""environment.yml pins what pyproject.toml lists, .ci/run runs the README's test command, the device scripts parse."""
import os
import re
import tomllib

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def pins(lines):
    out = {}
    for line in lines:
        match = re.fullmatch(r"([A-Za-z0-9_.\-]+)==([A-Za-z0-9_.+\-]+)", line.strip())
        if match:
            out[match.group(1).lower()] = match.group(2)
    return out


def test_environment_yml_and_pyproject_agree():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as handle:
        project = tomllib.load(handle)["project"]
    declared = pins(project["dependencies"] + project["optional-dependencies"]["test"])
    assert len(declared) == len(project["dependencies"]) + len(project["optional-dependencies"]["test"])
    with open(os.path.join(ROOT, "environment.yml"), encoding="utf-8") as handle:
        env = yaml.safe_load(handle)
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert pins(pip_section) == declared


def test_ci_runs_the_readme_test_command():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as handle:
        readme = handle.read()
    with open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8") as handle:
        ci = handle.read()
    command = re.search(r"<!-- test-command -->\s*```sh\n(.+?)\n```", readme, re.S).group(1).strip()
    assert command in ci


def test_the_device_scripts_parse():
    # They run only on the lent GPU machine; a syntax error would cost a whole device session.
    import glob
    import subprocess

    scripts = sorted(glob.glob(os.path.join(ROOT, "tools", "*.sh")))
    assert scripts
    for script in scripts:
        checked = subprocess.run(["bash", "-n", script], capture_output=True, text=True)
        assert checked.returncode == 0, f"{script}: {checked.stderr}"


def _readme_map() -> set[str]:
    """The package's modules README's map names, as paths under rollout_study/: an entry's name at the start of its
    line (engines/' under it), and every module present/'s lines list."""
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    block = text[text.index("## Map\n\n```\n"):].split("```")[1]
    named, folder = set(), None
    for line in block.splitlines():
        if line.startswith("notebooks/"):  # the package's part ends here
            break
        sub = re.match(r"^  (\w+)/(\s|$)", line)
        if sub:
            folder = sub.group(1) + "/"
        elif re.match(r"^  \S", line):
            folder = ""
        if folder == "present/":
            named |= {folder + name for name in re.findall(r"\b\w+\.py\b", line)}
        elif folder is not None and (entry := re.match(r"^ {2,4}(\w+\.py)\b", line)):
            named.add(folder + entry.group(1))
    return named


def test_readme_map_names_every_module_and_none_that_is_gone():
    package = os.path.join(ROOT, "rollout_study")
    modules = {os.path.relpath(os.path.join(d, f), package) for d, _, files in os.walk(package)
               for f in files if f.endswith(".py")}
    named = _readme_map()
    markers = {m for m in modules if os.path.basename(m) in ("__init__.py", "__main__.py")}
    assert modules - markers - named == set(), "modules README's map does not name"
    assert named - modules == set(), "README's map names modules that are gone"
    assert {"protocol.py", "engines/graph.py", "present/page.py"} <= named  # the three kinds of entry are read
