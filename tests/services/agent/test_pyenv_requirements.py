"""setup.pip's requirements file read as pip reads it (issue 39): every spelling of an include, a path or an
index is checked, refusals never quote a file outside the workdir, and uv gets the file as read, flattened."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from spotsweep.services.agent import pyenv, tree_gate
from spotsweep.services.agent.trial_user import resolve
from spotsweep.services.agent.requirements import check_url, flatten, logical_lines, options, read, split
from spotsweep.shared.errors import Refused

from tests.services.agent.test_pyenv import PKG, tree

SECRET = "the-secret-content-of-a-root-file"


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    (tmp_path / "secret").write_text(f"{SECRET}\n")  # outside the workdir
    work = tmp_path / "w"
    (work / "wheels").mkdir(parents=True)
    (work / "wheels" / "a-1.0-py3-none-any.whl").write_bytes(b"wheel")
    (work / "base.txt").write_text("numpy\n")
    return work


def refused(root: Path, text: str) -> str:
    (root / "requirements.txt").write_text(text)
    with pytest.raises(Refused) as e:
        read(root / "requirements.txt", root)
    assert SECRET not in str(e.value) and "secret" not in str(e.value)
    return str(e.value)


def test_lines_are_joined_split_and_stripped_as_pip_does() -> None:
    text = "a \\\n  >=1  # pinned\n# all comment\n\n-r\tb.txt\nc#not-a-comment\n"
    assert logical_lines(text) == [(1, "a   >=1"), (5, "-r\tb.txt"), (6, "c#not-a-comment")]
    assert split("requests>=2 ; python_version > '3' --hash=sha256:ab") == (
        "requests>=2 ; python_version > '3'", ["--hash=sha256:ab"])
    for spelled in ("-r\tx", "-rx", "--requirement=x", "--requirement x", "-r =x", "--requirement\f\tx"):
        assert options(split(spelled)[1]) == [("-r" if spelled.startswith("-r") else "--requirement", "x")], spelled


@pytest.mark.parametrize("line", [
    "-r\t../secret", "-r../secret", "--requirement=../secret", "-r \\\n ../secret", "-c /etc/passwd",
    "--constraint\t{root}/../secret", "-f /root", "--find-links=file:///etc", "../secret", "a @ file:///etc/passwd",
    "file:../secret", "-r link.txt"])
def test_a_path_outside_the_workdir_is_refused_in_every_spelling(root: Path, line: str) -> None:
    (root / "link.txt").symlink_to(root.parent / "secret")  # links are followed before the check
    why = refused(root, "numpy\n" + line.format(root=root) + "\n")
    assert why.startswith("requirements.txt, line 2: ") and "outside the workdir" in why, why


def test_an_include_that_is_not_a_small_regular_file_is_refused(root: Path) -> None:
    os.mkfifo(root / "fifo")  # reading it would wait forever
    assert "fifo is not a regular file" in refused(root, "-r fifo\n")
    assert "wheels is not a regular file" in refused(root, "-c wheels\n")


@pytest.mark.parametrize(("line", "said"), [
    ("--index-url file:///etc", "https"), ("-i http://pypi.internal/simple", "https"),
    ("--extra-index-url=https://10.0.0.5/simple", "not a public address"),
    ("--extra-index-url https://169.254.169.254/", "not a public address"),
    ("-i https://localhost:8080/simple", "looks internal"), ("-i https://pypi.corp.internal/", "looks internal"),
    ("-i https://devpi/", "looks internal"), ("x @ http://example.com/x.whl", "https"),
    ("git+ssh://git@example.com/x.git", "https"), ("--trusted-host example.com", "not one setup.pip takes"),
    ("-e .", "editable"), ("numpy --global-option=x", "not one setup.pip takes"), ("numpy -r base.txt", "no option but --hash"), ("-r", "needs a value"),
    ("--hash=sha256:00", "belongs on a requirement's line"), ("-r 'unclosed", "cannot read its options")])
def test_indexes_urls_and_options_obey_the_policy(root: Path, line: str, said: str) -> None:
    assert said in refused(root, line + "\n")


def test_uv_gets_the_file_as_read_with_includes_inlined_and_paths_absolute(root: Path, tmp_path: Path) -> None:
    (root / "requirements.txt").write_text(
        "-i https://pypi.org/simple\n-r\tbase.txt\n-c base.txt\n./wheels/a-1.0-py3-none-any.whl\n"
        "b @ file:wheels/a-1.0-py3-none-any.whl\nc @ https://example.com/c.whl --hash=sha256:00\n--no-index\n")
    found = read(root / "requirements.txt", root)
    wheel = (root / "wheels/a-1.0-py3-none-any.whl").resolve()
    assert found.requirements == ["--index-url https://pypi.org/simple", "--no-index", "numpy", str(wheel),
                                  f"b @ {wheel.as_uri()}", "c @ https://example.com/c.whl --hash=sha256:00"]
    assert found.constraints == ["numpy"] and found.named == ["numpy", "numpy"] and found.paths == [wheel, wheel]
    assert found.files == [(root / "requirements.txt").resolve(), *[(root / "base.txt").resolve()] * 2]
    reqs, _ = flatten(found, tmp_path)
    assert reqs.read_text().splitlines()[2:4] == ["numpy", str(wheel)]


def test_check_url_takes_public_https_only() -> None:
    assert check_url("https://pypi.org/simple") == "https://pypi.org/simple"
    assert check_url("git+https://github.com/a/b.git") == "git+https://github.com/a/b.git"
    for bad in ("http://pypi.org/simple", "https://127.0.0.1/", "https://[::1]/", "https://[fe80::1]/",
                "https://metadata.google.internal/", "ftp://example.com/"):
        with pytest.raises(Refused):
            check_url(bad)


def test_the_installers_tail_shows_no_path_outside_the_workdir(root: Path) -> None:
    tail = (f"error: cannot read /root/.aws/credentials\n  in {root}/wheels/x.whl from https://pypi.org/simple/x/\n"
            f"  (see /etc/spotsweep/agent.env)")
    assert pyenv.redact(tail, root) == ("error: cannot read <path>\n  in wheels/x.whl from https://pypi.org/simple/x/\n"
                                        "  (see <path>)")


USER = "spotsweep-pip"
FAKE_UV = """#!/bin/sh
echo "uid=$(id -u) home=$HOME"
cat /etc/shadow 2>&1 | head -n 1
echo "see /root/.aws/credentials"
exit 3
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="builds as another user: needs root")
def test_the_build_runs_as_the_trial_user_with_a_private_log(monkeypatch: pytest.MonkeyPatch) -> None:
    """uv (a stand-in that prints who it is and tries a root-only file) runs as the trial user; its log is the
    agent's alone; the error carries its tail without a path outside the workdir."""
    if subprocess.run(["id", USER], capture_output=True).returncode != 0:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", USER], check=True)
    user = resolve(USER)
    top = Path(tempfile.mkdtemp(prefix="spotsweep-pyenv-", dir="/tmp"))  # pytest's tmp_path is root's alone
    try:
        top.chmod(0o755)
        (top / "uv").write_text(FAKE_UV)
        (top / "uv").chmod(0o755)
        (top / "code").mkdir()
        (top / "code" / "requirements.txt").write_text("numpy\n")
        monkeypatch.setattr(pyenv, "_uv", lambda: str(top / "uv"))
        with pytest.raises(Refused) as e, pyenv.lease(top / "pyenvs", top / "code/requirements.txt", top / "code",
                                                       2**30, user=user):
            pass
        error = str(e.value)
        assert error.startswith("uv venv failed (exit 3):") and f"uid={user.uid} home=<path>" in error, error
        assert "Permission denied" in error and "root:" not in error and "see <path>" in error, error
        (log,) = (top / "pyenvs/locks").glob("*.log")
        assert (log.stat().st_mode & 0o777, log.stat().st_uid) == (0o600, 0)
        assert list((top / "pyenvs/envs").iterdir()) == [] and list((top / "pyenvs/builds").iterdir()) == []
    finally:
        shutil.rmtree(top, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0 or not Path("/usr/bin/python3").exists(), reason="builds as another user")
def test_an_env_built_as_the_trial_user_is_sealed_the_agents_and_read_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """A real uv build as the trial user (on the system's Python: this machine's agent Python lives under /root,
    which no trial user can run): the user's trial imports the wheel; no file of the env stays writable to it."""
    pytest.importorskip("uv")
    if subprocess.run(["id", USER], capture_output=True).returncode != 0:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", USER], check=True)
    user = resolve(USER)
    top = Path(tempfile.mkdtemp(prefix="spotsweep-pyenv-", dir="/tmp"))
    try:
        top.chmod(0o755)
        code = tree(top / "code")
        subprocess.run(["chmod", "-R", "a+rX", str(code)], check=True)
        monkeypatch.setenv("UV_OFFLINE", "1")
        monkeypatch.setattr(pyenv.sys, "executable", "/usr/bin/python3")
        with pyenv.lease(top / "pyenvs", code / "requirements.txt", code, 2**30, no_build=True, user=user) as env:
            got = subprocess.run([str(env / "bin/python"), "-c", f"import {PKG}; print({PKG}.VALUE)"], user=user.uid,
                                 group=user.gid, extra_groups=list(tree_gate.groups([env])), capture_output=True, text=True)
            assert got.stdout.strip() == "42", got.stderr
            writable = [p for p in [env, *env.rglob("*")] if not p.is_symlink()
                        and (p.lstat().st_uid != 0 or p.lstat().st_mode & 0o022)]
            assert writable == []
        assert list((top / "pyenvs/builds").iterdir()) == []  # its private build folder is gone
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_a_link_in_a_named_folder_counts_by_its_target_never_its_content(root: Path) -> None:
    (root / "pkg").mkdir()
    (root / "pkg" / "setup.py").write_text("v1")
    (root / "pkg" / "zero").symlink_to("/dev/zero")  # read, it would never end
    (root / "requirements.txt").write_text("./pkg\n")
    key = pyenv.env_key(root / "requirements.txt", root)[0]
    (root / "pkg" / "zero").unlink()
    (root / "pkg" / "zero").symlink_to(root.parent / "secret")
    assert pyenv.env_key(root / "requirements.txt", root)[0] != key
