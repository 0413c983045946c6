"""workbench.engine.datasets: building, reusing, checking and reading the sample datasets."""

from __future__ import annotations

import gc
import io
import json
import os
import pickle
import re
import shutil
import stat
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader

from workbench.engine import datasets as data
from workbench.engine.datasets import (
    BigramTokenWindows,
    DataError,
    DatasetPaths,
    ImageFiles,
    TokenWindows,
    build_datasets,
    check_image_folder,
    check_token_file,
    data_root,
    ensure_datasets,
)

SMALL = {"images_per_class": 8, "classes": 2, "token_mb": 0.05, "seed": 0}


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> DatasetPaths:
    """16 full-size images (enough to take the parallel path) and 50 KiB of tokens."""
    return build_datasets(tmp_path_factory.mktemp("small"), **SMALL)


def _files(root: Path) -> dict[str, int]:
    """Relative path -> mtime_ns of every file under root."""
    return {
        p.relative_to(root).as_posix(): p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()
    }


def _small_tensor(img: Image.Image) -> torch.Tensor:
    return torch.from_numpy(np.array(img.resize((32, 24)))).permute(2, 0, 1)


# --- layout, manifest, determinism ------------------------------------------------------------


def test_layout_and_manifest(small):
    assert small.images == small.root / "images" and small.tokens.name == "stdlib.bin"
    assert sorted(p.name for p in small.images.iterdir()) == ["class_00", "class_01"]
    assert sorted(p.name for p in (small.images / "class_00").iterdir()) == sorted(
        f"{n}.jpg" for n in range(8)
    )
    manifest = json.loads((small.root / "manifest.json").read_text())
    assert manifest["format"] == data.FORMAT_VERSION
    assert manifest["params"] == SMALL
    image_bytes = sum(p.stat().st_size for p in small.images.rglob("*.jpg"))
    assert manifest["images"]["count"] == 16 and manifest["images"]["bytes"] == image_bytes
    assert manifest["tokens"]["count"] == small.tokens.stat().st_size == int(0.05 * 2**20)
    assert manifest["total_bytes"] == image_bytes + manifest["tokens"]["count"]
    assert manifest["created"] and manifest["build_s"] > 0


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path, small):
    # `small` was rendered by forked workers, these in one process: the bytes must agree.
    again = build_datasets(tmp_path / "a", **{**SMALL, "images_per_class": 2})
    other = build_datasets(tmp_path / "b", **{**SMALL, "images_per_class": 2, "seed": 1})
    for name in ("class_00/0.jpg", "class_01/1.jpg"):
        assert (again.images / name).read_bytes() == (small.images / name).read_bytes()
        assert (other.images / name).read_bytes() != (small.images / name).read_bytes()
    assert again.tokens.read_bytes() == other.tokens.read_bytes()  # the corpus has no seed


def test_images_look_like_imagenet_jpegs(small):
    sizes = []
    for path in small.images.rglob("*.jpg"):
        with Image.open(path) as img:
            assert img.format == "JPEG" and img.mode == "RGB"
            assert min(img.size) >= 333 and max(img.size) == 500
        sizes.append(path.stat().st_size)
    assert 70_000 < np.mean(sizes) < 150_000  # ImageNet: about 110 KB at about 500x375
    assert len(set(sizes)) == len(sizes)


def test_tokens_are_the_stdlib_source_in_sorted_order(small):
    first = data.stdlib_sources()[0]
    assert Path(sysconfig.get_paths()["stdlib"]) in first.parents
    assert small.tokens.read_bytes().startswith(first.read_bytes()[:1000])
    assert all("site-packages" not in p.parts for p in data.stdlib_sources())


def test_build_prints_nothing_by_default(tmp_path, capsys):
    build_datasets(tmp_path, images_per_class=1, classes=1, token_mb=0.01)
    assert capsys.readouterr() == ("", "")


def test_progress_reaches_the_callback(tmp_path):
    messages: list[str] = []
    build_datasets(tmp_path, images_per_class=2, classes=1, token_mb=0.01, progress=messages.append)
    assert "images: 2/2" in messages and "datasets ready" in messages[-1]


# --- ensure_datasets: reuse, rebuild ------------------------------------------------------------


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_counts_rewrite_one_line_and_other_messages_end_it(monkeypatch):
    from workbench.engine.workloads.base import say_progress

    monkeypatch.setattr(sys, "stderr", _Terminal())
    for message in ("images: 40/80", "images: 80/80", "datasets ready in /x"):
        say_progress(message)
    assert sys.stderr.getvalue() == (
        "\rworkbench: images: 40/80\rworkbench: images: 80/80\n\rworkbench: datasets ready in /x\n"
    )


def test_in_a_log_file_each_update_is_a_line_of_its_own(capsys):
    from workbench.engine.workloads.base import say_progress

    for message in ("images: 40/80", "images: 80/80", "datasets ready in /x"):
        say_progress(message)  # pytest's capture: no terminal, as a CI log or a nohup file
    lines = ["images: 40/80", "images: 80/80", "datasets ready in /x"]
    assert capsys.readouterr().err.splitlines() == [f"workbench: {line}" for line in lines]


def test_a_build_follows_no_symlink_planted_at_a_predictable_name(tmp_path):
    """The manifest's temporary file was ``.manifest.json.<pid>.tmp`` and the lock was opened
    with ``open(.., "w")``: a symlink planted at either had a file of someone else's choosing
    overwritten or truncated."""
    victim = tmp_path / "victim.txt"
    victim.write_text("mine")
    root = tmp_path / "d"
    root.mkdir()
    (root / f".manifest.json.{os.getpid()}.tmp").symlink_to(victim)
    build_datasets(root, **SMALL)
    assert victim.read_text() == "mine" and not (root / "manifest.json").is_symlink()
    (root / ".lock").unlink()
    (root / ".lock").symlink_to(victim)
    with pytest.raises(OSError, match="symbolic links"):
        build_datasets(root, **SMALL)
    assert victim.read_text() == "mine"


def test_ensure_reuses_a_complete_build(tmp_path):
    params = {"images_per_class": 2, "classes": 2, "token_mb": 0.01}
    built = build_datasets(tmp_path, **params)
    before = _files(tmp_path)
    messages: list[str] = []
    assert ensure_datasets(tmp_path, progress=messages.append, **params) == built
    assert messages == [] and _files(tmp_path) == before


def test_ensure_rebuilds_an_interrupted_build(tmp_path):
    params = {"images_per_class": 2, "classes": 2, "token_mb": 0.01}
    build_datasets(tmp_path, **params)
    (tmp_path / "manifest.json").unlink()  # what a build killed before its end leaves
    (tmp_path / "images" / "class_01" / "1.jpg").write_bytes(b"half a jpeg")
    messages: list[str] = []
    ensure_datasets(tmp_path, progress=messages.append, **params)
    assert messages and (tmp_path / "manifest.json").exists()
    with Image.open(tmp_path / "images" / "class_01" / "1.jpg") as img:
        img.load()


def test_ensure_rebuilds_when_parameters_or_files_differ(tmp_path):
    build_datasets(tmp_path, images_per_class=2, classes=3, token_mb=0.01)
    paths = ensure_datasets(tmp_path, images_per_class=1, classes=2, token_mb=0.01)
    assert check_image_folder(paths.images) == (2, ["class_00", "class_01"])  # no stale class
    (paths.images / "class_00" / "0.jpg").unlink()
    ensure_datasets(tmp_path, images_per_class=1, classes=2, token_mb=0.01)
    assert (paths.images / "class_00" / "0.jpg").exists()


def test_ensure_rebuilds_on_another_format_version(tmp_path):
    build_datasets(tmp_path, images_per_class=1, classes=1, token_mb=0.01)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    (tmp_path / "manifest.json").write_text(json.dumps({**manifest, "format": -1}))
    ensure_datasets(tmp_path, images_per_class=1, classes=1, token_mb=0.01)
    assert data.read_manifest(tmp_path)["format"] == data.FORMAT_VERSION


def test_build_refuses_to_overwrite_images_it_did_not_make(tmp_path):
    mine = tmp_path / "images" / "cats" / "tabby.jpg"
    mine.parent.mkdir(parents=True)
    mine.write_bytes(b"precious")
    with pytest.raises(DataError, match=re.escape(str(tmp_path / "images"))):
        build_datasets(tmp_path, images_per_class=1, classes=1, token_mb=0.01)
    assert mine.read_bytes() == b"precious"


def test_bad_parameters_are_refused(tmp_path):
    with pytest.raises(ValueError, match="token_mb"):
        build_datasets(tmp_path, token_mb=0)
    with pytest.raises(TypeError):
        ensure_datasets(tmp_path, colour="blue")


# --- data_root ----------------------------------------------------------------------------------


def test_data_root_precedence(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("WORKBENCH_DATA", raising=False)
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path / "home"))
    assert data_root() == tmp_path / "home" / "data"  # no ./data yet
    (tmp_path / "data").mkdir()
    assert data_root() == tmp_path / "data"
    monkeypatch.setenv("WORKBENCH_DATA", str(tmp_path / "env"))
    assert data_root() == tmp_path / "env"
    assert data_root(tmp_path / "given") == tmp_path / "given"
    assert data_root("~/x") == Path.home() / "x"


def test_a_data_folder_others_can_write_is_refused_naming_it_and_the_override(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("WORKBENCH_DATA", raising=False)
    (tmp_path / "data").mkdir(mode=0o777)
    (tmp_path / "data").chmod(0o777)  # the umask may have taken bits away
    refusal = (rf"^./data \({tmp_path / 'data'}\) is writable by every user \(mode 777\): not "
               "adopted as the data root; pass --data ")  # fmt: skip
    with pytest.raises(data.InputError, match=refusal):
        data_root()
    assert data_root(tmp_path / "data") == tmp_path / "data"  # asked for by name: used


def test_ensure_without_a_root_builds_in_workbench_data(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_DATA", str(tmp_path / "shared"))
    paths = ensure_datasets(images_per_class=1, classes=1, token_mb=0.01)
    assert paths.root == tmp_path / "shared" and paths.tokens.is_file()


def test_data_root_default_home(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("WORKBENCH_DATA", raising=False)
    monkeypatch.delenv("WORKBENCH_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    assert data_root() == tmp_path / "user" / ".workbench" / "data"


# --- checking user paths ------------------------------------------------------------------------


def test_missing_directory(tmp_path):
    with pytest.raises(
        DataError, match=re.escape(f"data directory {tmp_path / 'nope'} does not exist")
    ):
        check_image_folder(tmp_path / "nope")


def test_file_instead_of_directory(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(DataError, match="is not a directory") as err:
        check_image_folder(tmp_path / "f")
    assert str(tmp_path / "f") in str(err.value)


def test_empty_directory_says_what_layout_is_expected(tmp_path):
    with pytest.raises(DataError) as err:
        check_image_folder(tmp_path)
    assert str(tmp_path) in str(err.value) and "<class>/<image>.jpg" in str(err.value)


def test_loose_images_without_class_folders(tmp_path, small):
    for n in range(3):
        (tmp_path / f"{n}.JPG").write_bytes((small.images / "class_00" / "0.jpg").read_bytes())
    with pytest.raises(DataError, match="3 images directly inside") as err:
        check_image_folder(tmp_path)
    assert str(tmp_path) in str(err.value)


def test_class_folder_without_images(tmp_path, small):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.PNG").write_bytes(b"")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "notes.txt").write_text("no images here")
    with pytest.raises(
        DataError, match=re.escape(f"class folder {tmp_path / 'b'} holds no images")
    ):
        check_image_folder(tmp_path)


def test_check_image_folder_counts(small):
    assert check_image_folder(small.images) == (16, ["class_00", "class_01"])


def test_check_token_file(tmp_path, small):
    assert check_token_file(small.tokens) == small.tokens.stat().st_size
    with pytest.raises(
        DataError, match=re.escape(f"token file {tmp_path / 'none.bin'} does not exist")
    ):
        check_token_file(tmp_path / "none.bin")
    (tmp_path / "one.bin").write_bytes(b"a")
    with pytest.raises(DataError, match="holds 1 bytes"):
        check_token_file(tmp_path / "one.bin")
    with pytest.raises(DataError, match="is not a file"):
        check_token_file(tmp_path)


# --- ImageFiles -----------------------------------------------------------------------------------


def test_image_files_orders_like_torchvision_image_folder(small):
    from torchvision.datasets import ImageFolder

    reference = ImageFolder(str(small.images))
    ours = ImageFiles(small.images)
    assert ours.classes == reference.classes
    assert ours.samples == reference.samples
    img, target = ours[len(ours) - 1]
    assert isinstance(img, Image.Image) and img.mode == "RGB" and target == 1


def test_image_files_applies_the_transform(small):
    x, target = ImageFiles(small.images, transform=_small_tensor)[0]
    assert x.shape == (3, 24, 32) and target == 0


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_corrupt_image_names_the_file(tmp_path, small, damage):
    bad = tmp_path / "c" / "bad.jpg"
    bad.parent.mkdir()
    payload = (small.images / "class_00" / "0.jpg").read_bytes()
    bad.write_bytes(payload[: len(payload) // 2] if damage == "truncate" else b"not a jpeg")
    dataset = ImageFiles(tmp_path)
    with pytest.raises(DataError, match="corrupt or unreadable image") as err:
        dataset[0]
    assert str(bad) in str(err.value)


def test_image_files_in_dataloader_workers(small):
    dataset = ImageFiles(small.images, transform=_small_tensor)
    loader = DataLoader(dataset, batch_size=4, num_workers=2, multiprocessing_context="fork")
    batches = list(loader)
    assert sum(len(y) for _, y in batches) == 16
    assert batches[0][0].shape == (4, 3, 24, 32)
    assert torch.cat([y for _, y in batches]).tolist() == [0] * 8 + [1] * 8


def test_corrupt_image_in_a_worker_still_names_the_file(tmp_path, monkeypatch):
    # After a worker raises, torch tears its workers down with a join timeout of
    # MP_STATUS_CHECK_INTERVAL (5 s); shorten it so this test does not wait on it.
    monkeypatch.setattr(torch.utils.data._utils, "MP_STATUS_CHECK_INTERVAL", 0.2)
    bad = tmp_path / "c" / "bad.jpg"
    bad.parent.mkdir()
    bad.write_bytes(b"not a jpeg")
    batches = iter(DataLoader(ImageFiles(tmp_path), num_workers=1, multiprocessing_context="fork"))
    with pytest.raises(DataError) as err:
        next(batches)
    message = str(err.value)
    del err, batches
    gc.collect()  # shut the worker down now, while the timeout is short
    assert "corrupt or unreadable image" in message and str(bad) in message


# --- TokenWindows ---------------------------------------------------------------------------------


def test_token_windows_shapes_and_shift(small):
    dataset = TokenWindows(small.tokens, block_size=64)
    raw = small.tokens.read_bytes()
    assert len(dataset) == (len(raw) - 1) // 64
    x, y = dataset[5]
    assert x.shape == y.shape == (64,) and x.dtype == y.dtype == torch.int64
    assert bytes(x.tolist()) == raw[5 * 64 : 6 * 64]
    assert torch.equal(x[1:], y[:-1]) and y[-1] == raw[6 * 64]
    _, last_y = dataset[-1]
    assert last_y[-1] == raw[len(dataset) * 64]  # the last window still has its next byte
    with pytest.raises(IndexError):
        dataset[len(dataset)]


def test_token_windows_pickle_and_workers(small):
    dataset = TokenWindows(small.tokens, block_size=32)
    dataset[0]  # opens the memmap in this process
    clone = pickle.loads(pickle.dumps(dataset))
    assert torch.equal(clone[3][0], dataset[3][0])
    loader = DataLoader(dataset, batch_size=8, num_workers=2, multiprocessing_context="fork")
    x, y = next(iter(loader))
    assert x.shape == y.shape == (8, 32)


def test_bigram_windows_are_byte_pairs_of_the_same_text(small):
    raw = small.tokens.read_bytes()
    vocab = 50257
    pairs = BigramTokenWindows(small.tokens, block_size=64, vocab=vocab)
    assert len(pairs) == len(TokenWindows(small.tokens, block_size=64))
    x, y = pairs[5]
    start = 5 * 64
    want = [(256 * raw[j - 1] + raw[j]) % vocab for j in range(start, start + 65)]
    assert x.tolist() == want[:-1] and y.tolist() == want[1:]
    assert x.dtype == torch.int64 and torch.equal(x[1:], y[:-1])
    first, _ = pairs[0]
    assert first[0] == raw[0] and first[1] == 256 * raw[0] + raw[1]  # no byte before the file
    ids = torch.cat([pairs[i][0] for i in range(len(pairs))])
    assert int(ids.max()) < vocab and len(ids.unique()) > 1000  # a vocabulary's range, not bytes'
    with pytest.raises(ValueError, match="vocab must be >= 256"):
        BigramTokenWindows(small.tokens, block_size=64, vocab=100)


def test_token_file_smaller_than_a_window(tmp_path):
    (tmp_path / "t.bin").write_bytes(b"0123456789")
    with pytest.raises(DataError, match="need at least 17"):
        TokenWindows(tmp_path / "t.bin", block_size=16)


# --- the classes can be learnt ------------------------------------------------------------------


def _features(pixels: np.ndarray) -> np.ndarray:
    """Mean colour and dominant gradient orientation (structure tensor), as a model might see."""
    rgb = pixels.astype(np.float32) / 255
    grey = rgb.mean(axis=2)
    gx, gy = np.diff(grey, axis=1)[:-1], np.diff(grey, axis=0)[:, :-1]
    jxx, jyy, jxy = (gx * gx).mean(), (gy * gy).mean(), (gx * gy).mean()
    coherence = np.hypot(jxx - jyy, 2 * jxy) / (jxx + jyy)
    angle = np.arctan2(2 * jxy, jxx - jyy)
    return np.concatenate(
        [rgb.mean(axis=(0, 1)), coherence * np.array([np.cos(angle), np.sin(angle)])]
    )


def _leave_one_out_accuracy(x: np.ndarray, y: np.ndarray) -> float:
    """Nearest class centroid, each sample left out of its own class's centroid."""
    hits = 0
    for i in range(len(x)):
        keep = np.arange(len(x)) != i
        centroids = np.stack([x[keep & (y == c)].mean(axis=0) for c in np.unique(y)])
        hits += int(np.argmin(((centroids - x[i]) ** 2).sum(axis=1)) == y[i])
    return hits / len(x)


def test_classes_are_distinguishable():
    classes, per_class = 10, 3
    x = np.stack(
        [
            _features(data.render_image(0, c, n, classes))
            for c in range(classes)
            for n in range(per_class)
        ]
    )
    y = np.repeat(np.arange(classes), per_class)
    assert _leave_one_out_accuracy(x, y) >= 0.9  # chance is 0.1
    assert _leave_one_out_accuracy(x[:, :3], y) >= 0.3  # colour alone, e.g. after a flip


def test_dataset_paths_is_frozen(small):
    with pytest.raises(AttributeError):
        small.root = Path(os.devnull)


def test_data_root_given_for_an_image_folder_says_where_the_images_are(small):
    with pytest.raises(DataError, match="is a workbench data root") as err:
        check_image_folder(small.root)
    assert str(small.images) in str(err.value)


def test_ensure_without_parameters_accepts_any_complete_build(tmp_path):
    """A burst (no parameters) must not rebuild a dataset someone sized on purpose."""
    from workbench.engine.datasets import build_datasets, ensure_datasets

    build_datasets(tmp_path, images_per_class=2, classes=2, token_mb=0.01)
    before = sorted(p.stat().st_mtime_ns for p in tmp_path.rglob("*.jpg"))
    paths = ensure_datasets(tmp_path)
    assert len(list(paths.images.rglob("*.jpg"))) == 4
    assert sorted(p.stat().st_mtime_ns for p in tmp_path.rglob("*.jpg")) == before


def _sigint_is_ignored(_job: int) -> bool:
    import signal

    return signal.getsignal(signal.SIGINT) is signal.SIG_IGN


def test_build_workers_leave_ctrl_c_to_the_parent():
    # A terminal's Ctrl-C reaches every process of the group; an idle build worker that took
    # it would print a KeyboardInterrupt traceback of its own. The parent stops the pool.
    from workbench.engine.datasets import _parallel_map

    if (os.cpu_count() or 1) < 2:
        pytest.skip("one core: the build runs serially, in this process")
    assert all(_parallel_map(_sigint_is_ignored, list(range(32))))


def test_images_for_batch_gives_an_epoch_of_short_epoch_batches():
    assert data.images_for_batch(256) == 1280  # x 10 classes = 12,800 = 50 batches of 256
    assert data.images_for_batch(100, classes=3, batches=2) == 67  # rounded up: 201 >= 200
    with pytest.raises(data.InputError, match="batch_size=0 is not allowed"):
        data.images_for_batch(0)


def test_a_set_for_a_batch_is_built_without_network_and_then_reused(tmp_path):
    paths = data.ensure_datasets_for_batch(tmp_path / "big", batch_size=1, classes=2)
    count, classes = data.check_image_folder(paths.images)
    assert count == 50 and len(classes) == 2  # 50 batches of 1
    first = sorted(p.stat().st_mtime_ns for p in paths.images.rglob("*.jpg"))
    again = data.ensure_datasets_for_batch(tmp_path / "big", batch_size=1, classes=2)
    assert again == paths
    assert sorted(p.stat().st_mtime_ns for p in paths.images.rglob("*.jpg")) == first


def test_a_generated_set_is_told_from_a_users_folder(tiny_data, tmp_path):
    assert data.is_sample_data(tiny_data / "images")
    assert data.is_sample_data(tiny_data / "tokens" / "stdlib.bin")
    mine = tmp_path / "images"
    shutil.copytree(tiny_data / "images", mine)  # the same files, but no build's manifest
    assert not data.is_sample_data(mine) and not data.is_sample_data(tiny_data)


def test_the_default_data_root_makes_a_new_workbench_home_private(
    tmp_path, monkeypatch, usual_umask
):
    """Before the history is first opened, a burst's data build may be what creates
    WORKBENCH_HOME: it must be 0700 then too, not the umask's 0755."""
    home = tmp_path / "home" / ".workbench"
    monkeypatch.setenv("WORKBENCH_HOME", str(home))
    monkeypatch.delenv("WORKBENCH_DATA", raising=False)
    monkeypatch.chdir(tmp_path)  # no ./data here
    assert data.data_root() == home / "data"
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert stat.S_IMODE(home.parent.stat().st_mode) == 0o700
