# weave_builtin_systems_source(SYSTEMS_DIR OUT): writes OUT, a C++ source holding the text of every
# SYSTEMS_DIR/*.json (the built-in systems of `--system=NAME`, src/sim/system.cc), so that they
# work from any directory. Editing a file re-runs the configure step (CMAKE_CONFIGURE_DEPENDS).
# Used by src/sim/CMakeLists.txt and by the libFuzzer build (fuzz/CMakeLists.txt).
function(weave_builtin_systems_source systems_dir out)
  file(GLOB files CONFIGURE_DEPENDS ${systems_dir}/*.json)
  list(SORT files)
  set(WEAVE_SYSTEM_ENTRIES "")
  set(WEAVE_SYSTEM_COUNT 0)
  foreach(f ${files})
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${f})
    get_filename_component(name ${f} NAME_WE)
    file(READ ${f} text)
    string(APPEND WEAVE_SYSTEM_ENTRIES "    {\"${name}\", R\"weave_json(${text})weave_json\"},\n")
    math(EXPR WEAVE_SYSTEM_COUNT "${WEAVE_SYSTEM_COUNT} + 1")
  endforeach()
  file(CONFIGURE OUTPUT ${out} CONTENT "// Generated from systems/*.json by src/sim/builtin_systems.cmake: do not edit.
#include <string_view>

namespace weave::sim::internal {

struct BuiltinSystem {
  std::string_view name;
  std::string_view json;
};

extern const BuiltinSystem kBuiltinSystems[];
extern const int kNumBuiltinSystems;

const BuiltinSystem kBuiltinSystems[] = {
@WEAVE_SYSTEM_ENTRIES@};
const int kNumBuiltinSystems = @WEAVE_SYSTEM_COUNT@;

}  // namespace weave::sim::internal
" @ONLY)
endfunction()
