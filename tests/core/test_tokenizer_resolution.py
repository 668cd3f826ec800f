"""One rule for finding tokenizers: folders, tito's shipped copies, the local Hugging Face cache, mappings.

The hub-cache tests build a real ``huggingface_hub`` cache folder
(``models--Qwen--Qwen3-0.6B/{blobs,refs/main,snapshots/<rev>}``, snapshot
files as symlinks into ``blobs``) holding the Qwen3 tokenizer fixture, and
simulate a log that names ``Qwen/Qwen3-0.6B`` from it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.support.cli import tito
from tests.support.helpers import REPO
from tito_cli.errors import EXIT_CHECK_FAILED, EXIT_OK, EXIT_USAGE, TokenizerError
from tito_cli.simulate import simulate
from tito_cli.tokenizer import (
    SHIPPED,
    TokenizerChoice,
    TokenText,
    parse_tokenizer_options,
    resolve,
    shipped_folder,
)

QWEN3 = REPO / "fixtures" / "tokenizers" / "qwen3"
HUB_ID = "Qwen/Qwen3-0.6B"
REVISION = "c1899de289a04d12100db370d81485cdf75e47ca"


def make_hub_cache(root: Path, repo_id: str = HUB_ID, source: Path = QWEN3) -> Path:
    """A Hugging Face hub cache holding ``source``'s files as ``repo_id`` at ``REVISION``."""
    repo = root / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / REVISION
    (repo / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(REVISION)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        data = (source / name).read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        (snapshot / name).symlink_to(Path("..", "..", "blobs", blob.name))
    return snapshot




@pytest.fixture(scope="module")
def hub_log(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """A two-session log simulated with ``Qwen/Qwen3-0.6B`` found in a local hub cache; (log, cache)."""
    root = tmp_path_factory.mktemp("hub")
    cache = root / "hub-cache"
    make_hub_cache(cache)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_CACHE", str(cache))
        simulate(root / "logs", sessions=2, seed=3, profile="qwen3", tokenizer=HUB_ID)
    yield root / "logs", cache


@pytest.fixture
def no_hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    empty = tmp_path / "empty-cache"
    empty.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(empty))
    return empty


def test_log_naming_a_hub_id_records_it_and_decodes_from_the_cache(
    hub_log: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    logs, cache = hub_log
    for path in logs.glob("turns-*.parquet"):
        assert pq.read_schema(path).metadata[b"tito.tokenizer"] == HUB_ID.encode()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.chdir(tmp_path)  # nothing to find from here: only the cache has it
    result = tito("inspect", "qwen3-3-0000", "--logs", logs, "--view", "samples", "--json")
    assert result.exit_code == EXIT_OK, result.output
    data = json.loads(result.stdout)
    assert data["tokenizer"] == HUB_ID
    text = "".join(r["text"] for r in data["samples"][0]["regions"])
    assert "<|im_start|>system" in text and "<tool_call>" in text


def test_hub_cache_is_found_through_hf_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    snapshot = make_hub_cache(tmp_path / "hf-home" / "hub")
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.chdir(tmp_path)
    assert resolve(HUB_ID) == snapshot
    assert len(TokenText.open(HUB_ID).tokenizer) == 151669


def test_hub_id_missing_from_the_cache_is_an_error_naming_what_was_tried(
    hub_log: tuple[Path, Path], no_hub_cache: Path, tmp_path: Path
) -> None:
    logs, _ = hub_log
    result = tito("dump", logs, "--out", tmp_path / "g")
    assert result.exit_code == EXIT_USAGE
    error = " ".join(result.stderr.split())
    assert f"ERROR the log's tokenizer '{HUB_ID}' is not found here" in error
    assert f"the folder {HUB_ID} from {logs} (and above) and the working directory" in error
    assert f"the hub id {HUB_ID} in the local Hugging Face cache {no_hub_cache}" in error
    assert "TIP pass --tokenizer PATH" in error and "hf download NAME" in error and "huggingface-cli" not in error
    assert not (tmp_path / "g").exists()


@pytest.fixture(scope="module")
def hub_goldens(hub_log: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """Goldens of the hub log dumped with the tokenizer from the hub cache, two copies of that tokenizer
    in folders ``a/qwen3`` and ``b/tok`` (no hub cache from here on), and what ``check`` prints on them."""
    logs, cache = hub_log
    root = tmp_path_factory.mktemp("goldens")
    golden = root / "golden"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_CACHE", str(cache))
        assert tito("dump", logs, "--out", golden).exit_code == EXIT_OK
    header = (golden / "qwen3-3-0000.txt").read_text().splitlines()[3]
    assert header == f"tokenizer: {HUB_ID} (vocabulary 151669)"
    shutil.copytree(QWEN3, root / "a" / "qwen3")
    shutil.copytree(QWEN3, root / "b" / "tok")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_CACHE", str(root / "no-cache"))
        mp.chdir(root / "a")
        reference = tito("check", logs, "--golden", golden, "--tokenizer", str(root / "b" / "tok"))
    assert reference.exit_code == EXIT_OK, reference.output
    assert "2 passed" in reference.stdout
    return golden, root, reference.stdout


@pytest.mark.slow
@pytest.mark.parametrize("folder", ["a", "b"])
@pytest.mark.parametrize(
    "option",
    ["{hub}={root}/a/qwen3", "{hub}=../b/tok", "{root}/b/tok"],
    ids=["id-to-absolute-folder", "id-to-relative-folder", "folder"],
)
def test_check_passes_identically_from_two_folders_and_two_tokenizer_paths(
    hub_log: tuple[Path, Path],
    hub_goldens: tuple[Path, Path, str],
    no_hub_cache: Path,
    monkeypatch: pytest.MonkeyPatch,
    folder: str,
    option: str,
) -> None:
    """Goldens name the tokenizer the log records, wherever it is found: they check everywhere."""
    logs, _ = hub_log
    golden, root, reference = hub_goldens
    monkeypatch.chdir(root / folder)
    result = tito("check", logs, "--golden", golden, "--tokenizer", option.format(hub=HUB_ID, root=root))
    assert result.exit_code == EXIT_OK, result.output
    assert result.stdout == reference


def test_a_changed_hub_golden_is_caught(
    hub_log: tuple[Path, Path], hub_goldens: tuple[Path, Path, str], no_hub_cache: Path, tmp_path: Path
) -> None:
    # The check above compares, it does not just pass.
    logs, _ = hub_log
    golden, root, _ = hub_goldens
    mine = tmp_path / "golden"
    shutil.copytree(golden, mine)
    changed = mine / "qwen3-3-0001.txt"
    changed.write_text(changed.read_text().replace("reward", "REWARD", 1))
    assert tito("check", logs, "--golden", mine, "--tokenizer", str(root / "b" / "tok")).exit_code == EXIT_CHECK_FAILED


def test_relative_names_look_in_the_log_folder_and_above_before_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    shutil.copytree(REPO / "fixtures" / "tokenizer", project / "tok")
    (project / "runs" / "day1").mkdir(parents=True)
    shutil.copytree(REPO / "fixtures" / "tokenizer", tmp_path / "elsewhere" / "tok")
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert resolve("tok", [project / "runs" / "day1"]) == project / "tok"
    assert resolve("tok", []) == tmp_path / "elsewhere" / "tok"


def test_shipped_tokenizers_are_the_fixtures_and_resolve_from_anywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fixtures = {"fixtures/tokenizer": REPO / "fixtures" / "tokenizer", "fixtures/tokenizers/qwen3": QWEN3}
    assert set(SHIPPED) == set(fixtures)
    for name, fixture in fixtures.items():
        shipped = shipped_folder(name)
        assert shipped is not None
        for file in ("tokenizer.json", "tokenizer_config.json"):
            assert (shipped / file).read_bytes() == (fixture / file).read_bytes(), f"{shipped / file} is stale"
        monkeypatch.chdir(tmp_path)
        assert resolve(name) == shipped
    assert (shipped_folder("fixtures/tokenizers/qwen3") / "NOTICE").read_text() == (QWEN3 / "NOTICE").read_text()


def test_tokenizer_options_parse_into_one_folder_and_a_mapping() -> None:
    choice = parse_tokenizer_options(["Qwen/Qwen3-8B=/models/qwen", "tok", "a=b=c"])
    assert choice == TokenizerChoice(override="tok", mapping={"Qwen/Qwen3-8B": "/models/qwen", "a": "b=c"})
    assert choice.name_for("Qwen/Qwen3-8B") == "Qwen/Qwen3-8B" and choice.name_for(None) == "tok"
    with pytest.raises(TokenizerError, match="two folders"):
        parse_tokenizer_options(["a", "b"])
    with pytest.raises(TokenizerError, match="expected NAME=PATH"):
        parse_tokenizer_options(["=x"])


def test_the_same_unusable_folder_is_the_same_error_in_every_command(tmp_path: Path) -> None:
    bad = tmp_path / "bad-tokenizer"
    bad.mkdir()
    (bad / "tokenizer.json").write_text("{not json")
    logs = REPO / "fixtures" / "logs"
    session = "qwen3-0-0000"
    outputs = {
        "simulate": tito("simulate", "--out", tmp_path / "sim", "-n", "1", "--tokenizer", bad),
        "inspect": tito("inspect", session, "--logs", logs, "--tokenizer", bad),
        "dump": tito("dump", logs, "--out", "-", "--session", session, "--tokenizer", bad),
        "check": tito("check", logs, "--golden", tmp_path / "g", "--tokenizer", bad),
    }
    for command, result in outputs.items():
        assert result.exit_code == EXIT_USAGE, (command, result.output)
        first = result.stderr.splitlines()[0]
        assert first.startswith(f"ERROR {bad}: cannot load tokenizer ("), (command, first)
        assert "TIP the folder needs tokenizer.json" in result.stderr, command
    assert not (tmp_path / "sim").exists()


def test_loading_never_runs_code_from_the_folder(tmp_path: Path) -> None:
    """A folder asking for remote code is refused, not executed."""
    folder = tmp_path / "remote"
    shutil.copytree(REPO / "fixtures" / "tokenizer", folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["auto_map"] = {"AutoTokenizer": ["evil.EvilTokenizer", None]}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    (folder / "evil.py").write_text(f"open({str(tmp_path / 'ran')!r}, 'w').close()\n")
    with contextlib.suppress(TokenizerError):
        TokenText.open(str(folder))
    assert not (tmp_path / "ran").exists()


@pytest.fixture(scope="module")
def torch_hidden(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """An environment where torch is not found, and where transformers then prints its PyTorch advice.

    tito's users mostly have no torch on the machine that rebuilds; CI has it (for the slime
    export), so the commands run with torch hidden (``sys.modules["torch"] = None`` makes
    ``find_spec`` say it is not installed, as transformers asks).
    """
    hide = tmp_path_factory.mktemp("no-torch")
    (hide / "sitecustomize.py").write_text('import sys\nsys.modules["torch"] = None\n')
    # Not the variables tito (or an earlier test in this process) set: the commands must set them.
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRANSFORMERS_")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env["PYTHONPATH"] = os.pathsep.join([str(hide), str(REPO), env.get("PYTHONPATH", "")])
    probe = [sys.executable, "-c", "import transformers"]
    assert "PyTorch was not found" in subprocess.run(probe, env=env, capture_output=True, text=True).stderr
    return env


@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [
        ["simulate", "--out", "{tmp}/sim", "-n", "1"],
        ["inspect", "qwen3-0-0000", "--logs", "{repo}/fixtures/logs", "--view", "samples"],
        ["dump", "{repo}/fixtures/logs", "--out", "-", "--session", "qwen3-0-0000"],
    ],
    ids=lambda args: args[0],
)
def test_no_pytorch_advice_on_stderr(torch_hidden: dict[str, str], tmp_path: Path, args: list[str]) -> None:
    """transformers' "PyTorch was not found" line is silenced in every command that loads a tokenizer."""
    command = [sys.executable, "-m", "tito_cli", *(a.format(tmp=tmp_path, repo=REPO) for a in args)]
    done = subprocess.run(command, env=torch_hidden, capture_output=True, text=True)
    assert done.returncode == EXIT_OK, done.stderr
    assert "PyTorch" not in done.stderr


def test_simulate_records_the_name_and_loads_the_mapped_folder(tmp_path: Path, no_hub_cache: Path) -> None:
    copy = tmp_path / "local-copy"
    shutil.copytree(REPO / "fixtures" / "tokenizer", copy)
    out = tmp_path / "logs"
    result = tito("simulate", "--out", out, "-n", "1", "--tokenizer", f"acme/tiny-coder={copy}")
    assert result.exit_code == EXIT_OK, result.output
    turns = next(out.glob("turns-*.parquet"))
    assert pq.read_schema(turns).metadata[b"tito.tokenizer"] == b"acme/tiny-coder"
    # Elsewhere the name alone is not found (not a folder, not in the cache) ...
    assert tito("dump", out, "--out", "-").exit_code == EXIT_USAGE
    # ... and the same mapping finds it.
    dumped = tito("dump", out, "--out", "-", "--tokenizer", f"acme/tiny-coder={copy}")
    assert dumped.exit_code == EXIT_OK and "tokenizer: acme/tiny-coder (vocabulary " in dumped.stdout
