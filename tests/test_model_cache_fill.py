"""A ModelCache's fill (pods/model_cache/fill.py) against the Hub stand-in on loopback (e2e/standin/hub.py):
huggingface_hub's own snapshot_download and verify_repo_checksums, the hub-cache layout, never a snapshot
overwritten, and every failure a reason the ModelCache's condition carries."""

from __future__ import annotations

import errno
import socket
from pathlib import Path

import pytest

from e2e.standin.hub import Hub, Repo
from pooling_operator.api import cache_fill_contract as F
from pooling_operator.cli import main
from pooling_operator.pods.model_cache.fill import FillError, classify, fill

REPO = "acme/tiny-embedder"


def model_folder(root: Path, seed: int = 0) -> Path:
    folder = root / f"model-{seed}"
    (folder / "1_Pooling").mkdir(parents=True)
    (folder / "config.json").write_text('{"architectures": ["BertModel"], "hidden_size": 8}')
    (folder / "tokenizer.json").write_text('{"version": "1.0", "vocab": ["a", "b"]}' * 40)
    (folder / "1_Pooling" / "config.json").write_text('{"pooling_mode_mean_tokens": true}')
    (folder / "model.safetensors").write_bytes(bytes((i * 31 + seed) % 251 for i in range(200_000)))
    return folder


def storage(claim: Path) -> Path:
    return claim / F.HUB_FOLDER / "models--acme--tiny-embedder"


def test_a_fill_lays_out_the_hub_cache_verified_and_a_second_fill_moves_nothing(tmp_path: Path) -> None:
    source, claim = model_folder(tmp_path), tmp_path / "claim"
    repo = Repo(REPO, source)
    with Hub({REPO: repo}) as hub:
        filled = fill(REPO, "main", claim, endpoint=hub.url)
        served = hub.bytes_served
        again = fill(REPO, "main", claim, endpoint=hub.url)
        assert hub.bytes_served == served  # the snapshot was there and matched the listing: nothing downloaded
    snapshot = storage(claim) / "snapshots" / repo.commit
    assert filled.revision == repo.commit and (storage(claim) / "refs" / "main").read_text() == repo.commit
    assert filled.files == 4 and filled.bytes == sum(len(v) for v in repo.files.values()) == filled.downloaded
    assert again.downloaded == 0 and again.files == 4
    for path, data in repo.files.items():
        assert (snapshot / path).read_bytes() == data
    assert (snapshot / "model.safetensors").is_symlink()  # huggingface_hub's own layout: links into blobs/
    assert not any((claim / F.STAGING_FOLDER).iterdir())  # the staging folder was removed


def test_a_new_revision_is_a_new_snapshot_beside_the_old_one(tmp_path: Path) -> None:
    claim = tmp_path / "claim"
    first = Repo(REPO, model_folder(tmp_path, 0))
    with Hub({REPO: first}) as hub:
        fill(REPO, first.commit, claim, endpoint=hub.url)
    old = storage(claim) / "snapshots" / first.commit
    before = {p: (p.stat().st_ino, p.read_bytes()) for p in old.rglob("*") if p.is_file()}
    second = Repo(REPO, model_folder(tmp_path, 1))
    with Hub({REPO: second}) as hub:
        filled = fill(REPO, "main", claim, endpoint=hub.url)
    assert filled.revision == second.commit != first.commit
    assert {p: (p.stat().st_ino, p.read_bytes()) for p in old.rglob("*") if p.is_file()} == before  # untouched
    assert (storage(claim) / "refs" / "main").read_text() == second.commit
    assert sorted(p.name for p in (storage(claim) / "snapshots").iterdir()) == sorted([first.commit, second.commit])


@pytest.mark.parametrize("fault", ["corrupt", "truncate"])
def test_a_corrupt_or_truncated_blob_fails_the_fill_and_publishes_nothing(tmp_path: Path, fault: str) -> None:
    claim = tmp_path / "claim"
    path = "model.safetensors" if fault == "corrupt" else "tokenizer.json"  # an LFS file (sha256), a plain one (sha1)
    repo = Repo(REPO, model_folder(tmp_path), faults={path: fault})
    with Hub({REPO: repo}) as hub, pytest.raises(FillError) as caught:
        fill(REPO, "main", claim, endpoint=hub.url)
    assert caught.value.reason == F.CORRUPT and path in str(caught.value), str(caught.value)
    algorithm = "sha256" if fault == "corrupt" else "git-sha1"
    assert algorithm in str(caught.value)
    assert not (storage(claim) / "snapshots" / repo.commit).exists()
    assert not any((claim / F.STAGING_FOLDER).iterdir())


def test_both_faults_at_once_are_both_named(tmp_path: Path) -> None:
    repo = Repo(REPO, model_folder(tmp_path), faults={"model.safetensors": "corrupt", "tokenizer.json": "truncate"})
    with Hub({REPO: repo}) as hub, pytest.raises(FillError) as caught:
        fill(REPO, "main", tmp_path / "claim", endpoint=hub.url)
    assert "2 of 4 files do not match" in str(caught.value) and "tokenizer.json" in str(caught.value)


@pytest.mark.parametrize(("repo_kw", "asked", "revision", "token", "reason"), [
    ({"token": "hf_right"}, REPO, "main", "hf_wrong", F.UNAUTHORIZED),
    ({"token": "hf_right"}, REPO, "main", None, F.UNAUTHORIZED),
    ({"gated": True}, REPO, "main", None, F.UNAUTHORIZED),
    ({}, "acme/nothing-here", "main", None, F.REPOSITORY_NOT_FOUND),
    ({}, REPO, "v9.9", None, F.REVISION_NOT_FOUND),
    ({}, REPO, "0" * 40, None, F.REVISION_NOT_FOUND),
])
def test_hub_refusals_become_permanent_reasons(tmp_path: Path, repo_kw: dict, asked: str, revision: str,
                                               token: str | None, reason: str) -> None:
    repo = Repo(REPO, model_folder(tmp_path), **repo_kw)
    with Hub({REPO: repo}) as hub, pytest.raises(FillError) as caught:
        fill(asked, revision, tmp_path / "claim", endpoint=hub.url, token=token)
    assert caught.value.reason == reason, str(caught.value)
    assert F.exit_code(reason) == F.EXIT_PERMANENT


def test_the_right_token_is_sent_and_accepted(tmp_path: Path) -> None:
    repo = Repo(REPO, model_folder(tmp_path), token="hf_right")
    with Hub({REPO: repo}) as hub:
        assert fill(REPO, "main", tmp_path / "claim", endpoint=hub.url, token="hf_right").files == 4


@pytest.mark.thorough
@pytest.mark.parametrize("revision", ["main", "a" * 40])  # a pinned commit: snapshot_download's own first request
def test_a_hub_that_does_not_answer_is_unreachable_and_retried(tmp_path: Path, revision: str) -> None:
    with socket.socket() as s:  # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(FillError) as caught:
        fill(REPO, revision, tmp_path / "claim", endpoint=f"http://127.0.0.1:{port}")
    assert caught.value.reason == F.HUB_UNREACHABLE, str(caught.value)
    assert F.exit_code(F.HUB_UNREACHABLE) == F.EXIT_RETRY


def test_a_broken_snapshot_already_on_the_claim_is_replaced_and_checked(tmp_path: Path) -> None:
    """A claim that was an ordinary hub cache once: an interrupted download left a partial snapshot."""
    claim = tmp_path / "claim"
    repo = Repo(REPO, model_folder(tmp_path))
    with Hub({REPO: repo}) as hub:
        fill(REPO, repo.commit, claim, endpoint=hub.url)
        snapshot = storage(claim) / "snapshots" / repo.commit
        blob = (snapshot / "model.safetensors").resolve()
        blob.write_bytes(blob.read_bytes()[:1000])  # a truncated blob in place
        (snapshot / "tokenizer.json").unlink()  # and a file missing
        filled = fill(REPO, repo.commit, claim, endpoint=hub.url)
    assert filled.downloaded > 0
    for path, data in repo.files.items():
        assert (snapshot / path).read_bytes() == data


def test_a_full_claim_is_no_space() -> None:
    err = classify(OSError(errno.ENOSPC, "No space left on device"))
    assert err.reason == F.NO_SPACE and "full" in str(err) and F.exit_code(F.NO_SPACE) == F.EXIT_RETRY


def test_the_command_writes_its_result_where_the_termination_message_is_read(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    repo = Repo(REPO, model_folder(tmp_path))
    result = tmp_path / "termination-log"
    claim = tmp_path / "claim"
    with Hub({REPO: repo}) as hub:
        assert main(["model-cache", "fill", "--repo", REPO, "--revision", "main", "--claim", str(claim),
                     "--endpoint", hub.url, "--result", str(result)]) == F.EXIT_OK
        ok = F.decode(result.read_text())
        assert ok == {"revision": repo.commit, "files": 4, "bytes": ok["bytes"], "downloaded": ok["bytes"]} and ok["bytes"] > 200_000
        monkeypatch.setenv("HF_TOKEN", "hf_not_needed")  # the token comes from the env, never an argument
        assert main(["model-cache", "fill", "--repo", "acme/missing", "--revision", "main", "--claim", str(claim),
                     "--endpoint", hub.url, "--result", str(result)]) == F.EXIT_PERMANENT
    failed = F.decode(result.read_text())
    assert failed is not None and failed["reason"] == F.REPOSITORY_NOT_FOUND and "revision" not in failed


def test_the_result_stays_within_what_a_kubelet_keeps() -> None:
    text = F.encode({F.RESULT_REASON: F.CORRUPT, F.RESULT_MESSAGE: "x" * 10_000})
    assert len(text.encode()) <= F.MESSAGE_LIMIT and F.decode(text) is not None
    assert F.decode("Traceback (most recent call last): ...") is None
    assert F.decode('{"reason": "Whatever"}') == {"reason": F.FILL_FAILED}
