# Writes OUT, a C++ source defining `const char* <NAME>()` that returns the text of IN (the VIZ
# page, engine/api/viz_page.html), so kilnd and `kiln viz` carry it without an installed data dir.
# Run by add_custom_command (engine/api/CMakeLists.txt): cmake -DIN=.. -DOUT=.. -DNAME=.. -P this.
file(READ "${IN}" content)
string(FIND "${content}" ")KILNEMBED\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${IN} contains the raw-string delimiter")
endif()
file(WRITE "${OUT}" "// Generated from ${IN} by embed_text.cmake; do not edit.\nnamespace kiln::api::viz {\nconst char* ${NAME}() {\n  return R\"KILNEMBED(${content})KILNEMBED\";\n}\n}  // namespace kiln::api::viz\n")
