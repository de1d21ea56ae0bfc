// Sanitizer defaults built into every fuzz target, so a target run by hand behaves as under run.sh
// (ASAN_OPTIONS / UBSAN_OPTIONS in the environment still override them): stop at the first report,
// with a stack, so libFuzzer saves the input; UBSan reads tests/fuzz/ubsan.supp.
extern "C" const char* __asan_default_options() {
  return "abort_on_error=1:detect_leaks=1:allocator_may_return_null=1";
}

extern "C" const char* __ubsan_default_options() {
  return "halt_on_error=1:abort_on_error=1:print_stacktrace=1:"
         "suppressions=" KILN_UBSAN_SUPPRESSIONS;
}
