#include "engine/base/build_id.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>

#include <cstdint>
#include <cstring>

namespace kiln {
namespace {

struct Search {
  uintptr_t base = 0;  // load address of the object that holds this file's code
  std::string hex;
};

// Aligned to 4 as ELF notes are on x86-64 and aarch64.
size_t Align4(size_t n) { return (n + 3) & ~size_t{3}; }

int OnObject(struct dl_phdr_info* info, size_t, void* data) {
  Search* s = static_cast<Search*>(data);
  if (info->dlpi_addr != s->base) return 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_NOTE) continue;
    const char* p = reinterpret_cast<const char*>(info->dlpi_addr + ph.p_vaddr);
    const char* end = p + ph.p_memsz;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      ElfW(Nhdr) nh;
      std::memcpy(&nh, p, sizeof(nh));
      const char* name = p + sizeof(nh);
      const char* desc = name + Align4(nh.n_namesz);
      if (desc + nh.n_descsz > end) break;
      if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 && std::memcmp(name, "GNU", 4) == 0 && nh.n_descsz > 0) {
        static const char kHex[] = "0123456789abcdef";
        for (size_t b = 0; b < nh.n_descsz; ++b) {
          const auto c = static_cast<unsigned char>(desc[b]);
          s->hex.push_back(kHex[c >> 4]);
          s->hex.push_back(kHex[c & 15]);
        }
        return 1;
      }
      p = desc + Align4(nh.n_descsz);
    }
  }
  return 1;
}

std::string Find() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&Find), &info) == 0) return "";
  Search s;
  // dlpi_addr is the load bias: 0 for a non-PIE executable, the mapping's base for a PIE or shared object.
  ElfW(Ehdr) eh;
  std::memcpy(&eh, info.dli_fbase, sizeof(eh));
  s.base = eh.e_type == ET_EXEC ? 0 : reinterpret_cast<uintptr_t>(info.dli_fbase);
  dl_iterate_phdr(OnObject, &s);
  return s.hex;
}

}  // namespace

const std::string& KilnBuildId() {
  static const std::string* id = new std::string(Find());
  return *id;
}

}  // namespace kiln
