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
shared = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared"))
config.substitutions.append(("%shared", shared))
config.substitutions.append(("%weave", os.path.join(build, "weave")))
