"""Build hook: generates sluice.v1 (protobuf messages and gRPC stubs) from the .proto files.

The protos are this package's proto/sluice/v1/: the one copy in the repository (its
proto/sluice/v1/config.proto and service.proto are links to them, for the C++ build), carried by
any copy of this directory and by the sdist (MANIFEST.in). SLUICE_PROTO_DIR overrides them.
Regular builds write the modules into the build directory only; an editable install
(pip install -e) writes them into sluice/v1/ of the source tree, which git ignores.
"""
import os
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
# service.proto imports config.proto; the server-only protos are not the client's business.
PROTOS = ["sluice/v1/config.proto", "sluice/v1/service.proto"]


def _proto_root():
    root = Path(os.environ.get("SLUICE_PROTO_DIR") or HERE / "proto")
    missing = [p for p in PROTOS if not (root / p).is_file()]
    if missing:
        raise RuntimeError("sluice: cannot find %s under %s (%s)" % (
            ", ".join(missing), root,
            "SLUICE_PROTO_DIR" if os.environ.get("SLUICE_PROTO_DIR") else "the package's proto/"))
    return root


def _generate(out_dir):
    # Imported here: grpcio-tools is a build requirement, not a runtime one.
    import grpc_tools
    from grpc_tools import protoc

    root = _proto_root()
    well_known = Path(grpc_tools.__file__).parent / "_proto"
    out_dir = Path(out_dir)
    package_dir = out_dir / "sluice" / "v1"
    package_dir.mkdir(parents=True, exist_ok=True)
    args = ["grpc_tools.protoc", f"-I{root}", f"-I{well_known}", f"--python_out={out_dir}",
            f"--pyi_out={out_dir}", f"--grpc_python_out={out_dir}"]
    args += [str(root / p) for p in PROTOS]
    if protoc.main(args) != 0:
        raise RuntimeError("sluice: protoc failed on %s" % ", ".join(PROTOS))
    (package_dir / "__init__.py").write_text(
        '"""sluice.v1: generated from proto/sluice/v1 at build time. Do not edit."""\n')


class BuildPyWithProtos(build_py):
    def run(self):
        if not getattr(self, "editable_mode", False):
            # build/lib persists between in-tree builds: start from the sources as they are now.
            shutil.rmtree(Path(self.build_lib) / "sluice", ignore_errors=True)
        super().run()
        if getattr(self, "editable_mode", False):
            _generate(HERE)
        else:
            _generate(self.build_lib)


setup(cmdclass={"build_py": BuildPyWithProtos})
