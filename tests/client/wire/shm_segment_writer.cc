// A helper for tests/python/test_shm_layout.py: the C++ side of the shared-memory segment, so the
// Python reader is checked against the one description of the layout and the real writer.
//
//   shm_segment_writer layout
//     prints the layout of client/wire/shared_segment_layout.h as one JSON object.
//   shm_segment_writer write SLOTS SLOT_BYTES FULL_SLOT...
//     creates a segment with SharedSegment::Create, fills each FULL_SLOT with bytes
//     (slot * 31 + i) % 251 and marks it full, prints {"name", "attach_key", "slots",
//     "slot_bytes", "total_bytes"} as one JSON line, then waits for a line on stdin and prints
//     {"attached", "state"}: whether the reader wrote the attach key, and the state words it left.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include "client/wire/shared_segment.h"
#include "client/wire/shared_segment_layout.h"

namespace sluice {
namespace {

size_t FieldOffset(std::string_view name) {
  for (const shm_layout::Field& f : shm_layout::kHeaderFields) {
    if (f.name == name) return f.offset;
  }
  std::abort();
}

uint32_t Word(const uint8_t* base, size_t offset) {
  uint32_t value;
  std::memcpy(&value, base + offset, sizeof(value));
  return value;
}

int PrintLayout() {
  std::string magic(shm_layout::kMagic, sizeof(shm_layout::kMagic));
  std::printf("{\"magic\": \"%s\", \"header_bytes\": %llu, \"max_slots\": %d, ", magic.c_str(),
              static_cast<unsigned long long>(shm_layout::kHeaderBytes), shm_layout::kMaxSlots);
  std::printf("\"slot_free\": %u, \"slot_full\": %u, \"segment_key\": \"%s\", ",
              shm_layout::kSlotFree, shm_layout::kSlotFull, shm_layout::kSegmentKey);
  std::printf("\"attach_key_key\": \"%s\", \"attach_key_bytes\": %zu, \"max_slot_bytes\": %llu, ",
              shm_layout::kAttachKeyKey, shm_layout::kAttachKeyBytes,
              static_cast<unsigned long long>(shm_layout::kMaxSlotBytes));
  std::printf("\"memfd_name\": \"%s\", \"required_seals\": %u, \"id_bytes\": %zu, \"fields\": [",
              shm_layout::kMemfdName, shm_layout::kRequiredSeals, shm_layout::kIdBytes);
  const char* separator = "";
  for (const shm_layout::Field& f : shm_layout::kHeaderFields) {
    std::printf("%s[\"%s\", %zu, %zu]", separator, f.name, f.offset, f.size);
    separator = ", ";
  }
  std::printf("]}\n");
  return 0;
}

int Write(int slots, uint64_t slot_bytes, const std::vector<int>& full) {
  Result<std::shared_ptr<SharedSegment>> created = SharedSegment::Create(slots, slot_bytes);
  if (!created.ok()) {
    std::fprintf(stderr, "%s\n", created.status().ToString().c_str());
    return 1;
  }
  const std::shared_ptr<SharedSegment>& segment = *created;
  for (int slot : full) {
    uint8_t* data = segment->SlotData(slot);
    for (uint64_t i = 0; i < segment->slot_bytes(); ++i) {
      data[i] = static_cast<uint8_t>((static_cast<uint64_t>(slot) * 31 + i) % 251);
    }
    segment->MarkFull(slot);
  }
  std::printf(
      "{\"name\": \"%s\", \"attach_key\": \"%s\", \"slots\": %d, \"slot_bytes\": %llu, "
      "\"total_bytes\": %llu}\n",
      segment->name().c_str(), segment->attach_key().c_str(), segment->slots(),
      static_cast<unsigned long long>(segment->slot_bytes()),
      static_cast<unsigned long long>(segment->total_bytes()));
  std::fflush(stdout);
  std::string line;
  std::getline(std::cin, line);
  // What the reader left, read through the layout table (the reader has finished: it wrote
  // the line only after).
  const uint8_t* base = segment->SlotData(0) - shm_layout::kHeaderBytes;
  std::printf("{\"attached\": %s, \"state\": [", segment->attached() ? "true" : "false");
  for (int s = 0; s < segment->slots(); ++s) {
    std::printf("%s%u", s == 0 ? "" : ", ",
                Word(base, FieldOffset("state") + sizeof(uint32_t) * static_cast<size_t>(s)));
  }
  std::printf("]}\n");
  return 0;
}

}  // namespace
}  // namespace sluice

int main(int argc, char** argv) {
  const std::string command = argc > 1 ? argv[1] : "";
  if (command == "layout" && argc == 2) return sluice::PrintLayout();
  if (command == "write" && argc >= 4) {
    std::vector<int> full;
    for (int i = 4; i < argc; ++i) full.push_back(std::atoi(argv[i]));
    return sluice::Write(std::atoi(argv[2]), std::strtoull(argv[3], nullptr, 10), full);
  }
  std::fprintf(stderr, "usage: %s layout | write SLOTS SLOT_BYTES FULL_SLOT...\n", argv[0]);
  return 2;
}
