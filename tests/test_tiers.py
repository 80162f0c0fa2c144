"""Tiered checkpoints (trainer_bridge/checkpoint/tiers.py): a durable tier filled in the background, checked after copy;
restore from it when the fast tier is lost, and from the previous sound copy when the newest is damaged."""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

sys.path.insert(0, str(Path(__file__).parent / "dist"))
from scenario_configs import base_config, run_with_shards  # noqa: E402

from runio.layout import RunPaths  # noqa: E402
from trainer_bridge.checkpoint.store import CHECKSUMS, LATEST, write_checksums  # noqa: E402
from trainer_bridge.config import CheckpointConfig  # noqa: E402
from trainer_bridge.loop.synthetic import write_synthetic_shards  # noqa: E402
from trainer_bridge.checkpoint.tiers import DurableTier, TierCopyError, TierUploader  # noqa: E402
from trainer_bridge.loop.train import TrainHooks, Trainer, train  # noqa: E402


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("shards") / "shards"
    write_synthetic_shards(path)
    return path


def tiered(durable: Path, steps: int = 6):
    return base_config({"model": {"n_layers": 2}, "steps": steps, "eval": {"interval": 0},
                        "batch": {"global_batch_size": 4, "micro_batch_size": 2},
                        "checkpoint": {"interval": 2, "tiers": [{"keep_last": 1},
                                                                # every due copy, however far behind the
                                                                # uploader is on a loaded machine: the
                                                                # tests below name the steps they expect
                                                                {"path": str(durable), "keep_last": 3,
                                                                 "coalesce": False}]}})


def flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def test_tier_config_names_the_field():
    with pytest.raises(ValidationError, match=r"checkpoint.tiers.0.path"):
        CheckpointConfig(tiers=[{"path": "/fast"}])
    with pytest.raises(ValidationError, match=r"checkpoint.tiers.1.path"):
        CheckpointConfig(tiers=[{}, {"keep_last": 3}])
    with pytest.raises(ValidationError, match="keep_last"):
        CheckpointConfig(tiers=[{}, {"path": "/d", "keep_last": 0}])
    with pytest.raises(ValidationError, match=r"tiers\.1\.path[\s\S]*no fsspec file system for 'nosuchfs'"):
        CheckpointConfig(tiers=[{}, {"path": "nosuchfs://bucket/x"}])
    assert CheckpointConfig(tiers=[{}, {"path": "memory://durable"}]).durable_tiers[0].path == "memory://durable"


def test_fast_tier_lost_or_durable_copy_damaged(shards, tmp_path, monkeypatch):
    """Uninterrupted reference; a run stopped after step 4 (as a crash would) whose whole fast tier is then
    deleted resumes from the durable tier's step 4 and continues bit for bit; with a byte flipped in the durable
    step 4, the damage is said and step 2 is used, again bit for bit."""
    full = train(tiered(tmp_path / "durable-full"), run_with_shards(tmp_path / "full" / "run", shards))
    cut = run_with_shards(tmp_path / "a" / "run", shards)
    train(tiered(tmp_path / "durable-a"), cut, hooks=TrainHooks(stop_after_step=4))
    durable_a = Path(cut.durable_checkpoints(str(tmp_path / "durable-a")))
    assert sorted(p.name for p in durable_a.glob("step-*")) == ["step-00000002", "step-00000004"]
    assert (durable_a / LATEST).read_text().strip() == "step-00000004"
    assert sorted(p.name for p in cut.checkpoints.glob("step-*")) == ["step-00000004"]  # fast tier: keep_last 1
    assert not list(cut.checkpoints.glob("*.uploading-*"))
    shutil.copytree(durable_a.parent.parent, tmp_path / "durable-b")  # the same durable state for the second case

    shutil.rmtree(cut.checkpoints)  # the fast disk is lost
    resumed = train(tiered(tmp_path / "durable-a"), cut)
    assert resumed.resumed_from == "step-00000004"
    assert resumed.losses == {s: full.losses[s] for s in (4, 5)}

    damaged = run_with_shards(tmp_path / "b" / "run", shards)
    durable_b = Path(damaged.durable_checkpoints(str(tmp_path / "durable-b")))
    flip_byte(next((durable_b / "step-00000004").glob("*.distcp")))
    said = []
    monkeypatch.setattr(Trainer, "_say", lambda self, message: said.append(message))
    again = train(tiered(tmp_path / "durable-b"), damaged)
    assert any("step-00000004 is damaged" in line and "checksum" in line for line in said), said
    assert again.resumed_from == "step-00000002"
    assert again.losses == {s: full.losses[s] for s in range(2, 6)}
    # the run went on and copied its new checkpoints, the damaged copy among those replaced by a sound one
    assert DurableTier(str(durable_b)).problem("step-00000004") is None


def fake_checkpoint(root: Path, name: str) -> Path:
    path = root / name
    path.mkdir(parents=True)
    (path / ".metadata").write_bytes(b"meta")
    (path / "__0_0.distcp").write_bytes(bytes(range(256)) * 64)
    write_checksums(path)
    return path


def test_a_copy_damaged_in_transit_is_not_kept(tmp_path):
    source = fake_checkpoint(tmp_path / "fast", "step-00000002")
    tier = DurableTier(str(tmp_path / "durable"), keep_last=2)
    tier.upload(source, "step-00000002")
    real_put = tier._put

    def corrupting_put(local, remote):
        real_put(local, remote)
        if remote.endswith(".distcp"):
            flip_byte(Path(remote))

    second = fake_checkpoint(tmp_path / "fast", "step-00000004")
    tier._put = corrupting_put
    with pytest.raises(TierCopyError, match="step-00000004.*does not match its checksum"):
        tier.upload(second, "step-00000004")
    assert tier.names() == ["step-00000002"]  # the previous one stays; no half copy is a checkpoint
    assert (tmp_path / "durable" / LATEST).read_text().strip() == "step-00000002"

    # the uploader reports the failure and carries on; the hand-over copy is gone either way
    said = []
    uploader = TierUploader([tier], said.append)
    uploader.submit(second, 4, final=True)
    uploader.close()
    assert uploader.failures == 1 and "not copied" in said[0]
    assert not list((tmp_path / "fast").glob("*.uploading-*"))
    assert (second / CHECKSUMS).exists()  # the fast tier's own copy is untouched


def test_a_uri_tier_through_fsspec(tmp_path):
    """The same protocol on a non-local fsspec file system (memory://, as s3:// would be)."""
    import fsspec

    source = fake_checkpoint(tmp_path / "fast", "step-00000002")
    newer = fake_checkpoint(tmp_path / "fast", "step-00000004")
    uri = f"memory://tiers-{tmp_path.name}/run/checkpoints"
    tier = DurableTier(uri, keep_last=1)
    tier.upload(source, "step-00000002")
    tier.upload(newer, "step-00000004")
    assert tier.names() == ["step-00000004"]  # keep_last 1: the older one pruned
    fresh = DurableTier(uri)  # another process: nothing verified yet
    assert fresh.problem("step-00000004") is None
    fs, root = fsspec.core.url_to_fs(uri)
    blob = f"{root}/step-00000004/__0_0.distcp"
    data = bytearray(fs.cat_file(blob))
    data[100] ^= 1
    fs.pipe_file(blob, bytes(data))
    assert DurableTier(uri).problem("step-00000004") == "__0_0.distcp does not match its checksum"
    fs.pipe_file(blob, (newer / "__0_0.distcp").read_bytes())
    restored = DurableTier(uri).download("step-00000004", tmp_path / "lost")
    assert (restored / "__0_0.distcp").read_bytes() == (newer / "__0_0.distcp").read_bytes()
    assert (tmp_path / "lost" / LATEST).read_text().strip() == "step-00000004"


def test_a_lagging_uploader_copies_only_the_newest(tmp_path):
    """Checkpoints handed over while the uploader cannot run (the loop checkpointing) are coalesced: once it may,
    it copies only the newest one due, drops the older hand-overs, and the lag counts from the oldest."""
    now = [100.0]
    tier = DurableTier(str(tmp_path / "durable"), keep_last=5)
    said = []
    uploader = TierUploader([tier], said.append, clock=lambda: now[0])
    uploader.pause()
    for index, step in enumerate((2, 4, 6)):
        now[0] = 100.0 + index
        uploader.submit(fake_checkpoint(tmp_path / "fast", f"step-{step:08d}"), step, final=False)
    now[0] = 110.0
    assert uploader.lag_seconds() == 10.0
    uploader.resume()
    uploader.close()
    assert uploader.uploaded == [(tier.uri, "step-00000006")]
    assert uploader.skipped == [(tier.uri, "step-00000002"), (tier.uri, "step-00000004")]
    assert tier.names() == ["step-00000006"] and tier.problem("step-00000006") is None
    assert not list((tmp_path / "fast").glob("*.uploading-*"))  # the dropped hand-overs are gone too
    assert uploader.last_lag_s == 10.0  # from the oldest checkpoint the copy stood in for
    # each checkpoint not copied is said, with the one copied in its place
    assert [line for line in said if "not copied" in line] == [
        f"durable tier {tier.uri}: step-0000000{s} not copied, step-00000006 is copied in its place (the uploader "
        "was behind; coalesce: false copies each)" for s in (2, 4)]


def test_a_tier_without_coalescing_gets_every_due_checkpoint_in_order(tmp_path):
    tier = DurableTier(str(tmp_path / "durable"), keep_last=5, coalesce=False)
    uploader = TierUploader([tier], print)
    uploader.pause()
    for step in (2, 4, 6):
        uploader.submit(fake_checkpoint(tmp_path / "fast", f"step-{step:08d}"), step, final=False)
    uploader.resume()
    uploader.close()
    assert uploader.uploaded == [(tier.uri, f"step-0000000{s}") for s in (2, 4, 6)] and uploader.skipped == []
    assert sorted(tier.names()) == ["step-00000002", "step-00000004", "step-00000006"]


def test_coalescing_is_per_tier(tmp_path):
    """A tier copying every second checkpoint gets the newest one due on it, not the newest of all."""
    every_one = DurableTier(str(tmp_path / "a"), keep_last=5, every=1, interval=2)
    every_two = DurableTier(str(tmp_path / "b"), keep_last=5, every=2, interval=2)
    uploader = TierUploader([every_one, every_two], print)
    uploader.pause()
    for step in (2, 4, 6):
        uploader.submit(fake_checkpoint(tmp_path / "fast", f"step-{step:08d}"), step, final=False)
    uploader.resume()
    uploader.close()
    assert every_one.names() == ["step-00000006"]
    assert every_two.names() == ["step-00000004"]
    assert not list((tmp_path / "fast").glob("*.uploading-*"))
