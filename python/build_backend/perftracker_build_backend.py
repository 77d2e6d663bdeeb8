"""PEP 517 build backend for the perftracker agent (pyproject.toml's build-backend).

`pip install --no-build-isolation <perftracker source>` (offline; no setuptools needed)
builds the agent-only CMake tree (PERFTRACKER_AGENT_ONLY) for the interpreter that runs pip
and packs a wheel for that interpreter: the `perftracker` package (perftracker.agent, the
perftracker._agent extension, _boot/sitecustomize.py that `perftracker run` puts on the job's
PYTHONPATH) and the NCCL profiler plugin (perftracker/lib/). Needs a C++20 compiler, CMake,
that Python's headers, pybind11 and nlohmann-json (docs/live-mode.md); Ninja and ccache are
used when found. PERFTRACKER_CMAKE_ARGS adds CMake arguments (e.g. -DCMAKE_PREFIX_PATH=...).
"""

import base64
import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile

NAME = "perftracker"
VERSION = "0.1.0"
SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DIST_INFO = "%s-%s.dist-info" % (NAME, VERSION)


def _tag():
    impl = "cp%d%d" % sys.version_info[:2]
    plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return "%s-%s-%s" % (impl, impl, plat)


def _metadata():
    return ("Metadata-Version: 2.1\nName: %s\nVersion: %s\n"
            "Summary: perftracker's in-job agent (diagnoses slow distributed training jobs)\n"
            "Requires-Python: >=3.10\n" % (NAME, VERSION))


def _wheel_file():
    return ("Wheel-Version: 1.0\nGenerator: perftracker_build_backend\n"
            "Root-Is-Purelib: false\nTag: %s\n" % _tag())


def get_requires_for_build_wheel(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    d = os.path.join(metadata_directory, DIST_INFO)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "METADATA"), "w") as f:
        f.write(_metadata())
    with open(os.path.join(d, "WHEEL"), "w") as f:
        f.write(_wheel_file())
    return DIST_INFO


def _run(cmd):
    print("perftracker build: " + " ".join(shlex.quote(c) for c in cmd), file=sys.stderr)
    subprocess.run(cmd, check=True, stdout=sys.stderr)


def _build(build_dir):
    if shutil.which("cmake") is None:
        raise RuntimeError("perftracker: CMake not found (Debian: apt-get install cmake)")
    cmd = ["cmake", "-S", SOURCE, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
           "-DPERFTRACKER_AGENT_ONLY=ON", "-DPython3_EXECUTABLE=" + sys.executable]
    if shutil.which("ninja"):
        cmd += ["-G", "Ninja"]
    cmd += shlex.split(os.environ.get("PERFTRACKER_CMAKE_ARGS", ""))
    _run(cmd)
    _run(["cmake", "--build", build_dir, "-j", str(os.cpu_count() or 2)])


def _files(build_dir):
    """(path in the wheel, file on disk) of everything the wheel holds."""
    pkg = os.path.join(build_dir, "python", NAME)
    out = []
    for root, _, names in os.walk(pkg):
        for n in sorted(names):
            if n.endswith((".py", ".so")):
                path = os.path.join(root, n)
                out.append((os.path.relpath(path, os.path.dirname(pkg)), path))
    if not any(os.path.basename(a).startswith("_agent") for a, _ in out):
        raise RuntimeError("perftracker: the agent (perftracker._agent) was not built for %s: "
                           "see the CMake output above (Python headers? pybind11?)"
                           % sys.executable)
    plugin = os.path.join(build_dir, "src", "perftracker", "sources", "nccl",
                          "libperftracker_nccl_profiler.so")
    if os.path.exists(plugin):
        out.append((NAME + "/lib/libperftracker_nccl_profiler.so", plugin))
    return out


def _record_line(arc, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (arc, digest, len(data))


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    build_dir = tempfile.mkdtemp(prefix="perftracker-wheel-")
    try:
        _build(build_dir)
        name = "%s-%s-%s.whl" % (NAME, VERSION, _tag())
        record = []
        with zipfile.ZipFile(os.path.join(wheel_directory, name), "w",
                             zipfile.ZIP_DEFLATED) as z:
            entries = [(arc, open(path, "rb").read()) for arc, path in _files(build_dir)]
            entries += [(DIST_INFO + "/METADATA", _metadata().encode()),
                        (DIST_INFO + "/WHEEL", _wheel_file().encode())]
            for arc, data in entries:
                info = zipfile.ZipInfo(arc, date_time=(2024, 1, 1, 0, 0, 0))
                info.external_attr = (0o755 if arc.endswith(".so") else 0o644) << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                z.writestr(info, data)
                record.append(_record_line(arc, data))
            record.append(DIST_INFO + "/RECORD,,")
            z.writestr(DIST_INFO + "/RECORD", "\n".join(record) + "\n")
        return name
    finally:
        shutil.rmtree(build_dir, ignore_errors=True)
