# lit configuration: every *.hlo file here is a test; RUN lines use `weave` and `FileCheck`.
import os
import lit.formats

config.name = "weave"
config.test_format = lit.formats.ShTest(execute_external=True)
config.suffixes = [".hlo"]
config.excludes = ["Inputs"]  # inputs shared by several tests, not tests themselves
config.test_source_root = os.path.dirname(__file__)
build = os.environ.get("WEAVE_BUILD", os.path.join(os.path.dirname(__file__), "..", "..", "build"))
config.test_exec_root = os.path.join(build, "lit")
config.environment["PATH"] = os.pathsep.join(
    [build, "/usr/lib/llvm-14/bin", config.environment.get("PATH", os.environ["PATH"])])
# ../shared (real XLA dumps, examples) sits beside the checkout in development and CI, not in a
# clone on its own: tests that read it say `REQUIRES: shared` and are reported UNSUPPORTED without
# it. WEAVE_SHARED_DIR points elsewhere (a path that does not exist: run as a lone clone would).
shared = os.path.abspath(os.environ.get(
    "WEAVE_SHARED_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared")))
if os.path.isdir(os.path.join(shared, "examples")) and os.path.isdir(os.path.join(shared, "real")):
    config.available_features.add("shared")
else:
    lit_config.note("no ../shared beside the checkout (%s): tests that read its dumps and "
                    "examples are UNSUPPORTED" % shared)
# A sanitizer build (make test SANITIZE=1 uses build-asan) reserves terabytes of address space:
# tests that cap it with `ulimit -v` say `UNSUPPORTED: asan`.
if "asan" in os.path.basename(os.path.normpath(build)):
    config.available_features.add("asan")
config.substitutions.append(("%shared", shared))
config.substitutions.append(("%weave", os.path.join(build, "weave")))
