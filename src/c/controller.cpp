// The C API's version, error names, controller, groups and files (include/memcg/c/memcg.h).
#include <cstring>
#include <string>
#include "memcg/base/errors.hpp"
#include "memcg/base/version.hpp"
#include "memcg/files/files.hpp"
#include "handles.hpp"

using memcg::capi::guarded;

static_assert(MEMCG_C_VERSION_MAJOR == MEMCG_VERSION_MAJOR &&
                  MEMCG_C_VERSION_MINOR == MEMCG_VERSION_MINOR &&
                  MEMCG_C_VERSION_PATCH == MEMCG_VERSION_PATCH,
              "memcg/c/memcg.h's version must follow project() in CMakeLists.txt");

using memcg::capi::copy_out;

extern "C" {

unsigned memcg_version(void) {
  const memcg::Version v = memcg::version();
  return static_cast<unsigned>(v.major * 10000 + v.minor * 100 + v.patch);
}

const char* memcg_version_string(void) { return memcg::version().text; }

const char* memcg_errno_name(int code) { return memcg::errno_name(code); }

int memcg_quote(const char* text, size_t length, char* buf, size_t size, size_t* length_out) {
  if (text == nullptr && length != 0) return EINVAL;
  return guarded([&] {
    static constexpr char kHex[] = "0123456789abcdef";
    std::string out = "\"";
    const size_t shown = length > MEMCG_QUOTE_MAX ? MEMCG_QUOTE_MAX : length;
    for (size_t i = 0; i < shown; ++i) {
      const auto c = static_cast<unsigned char>(text[i]);
      if (c == '"' || c == '\\') {
        out += '\\';
        out += static_cast<char>(c);
      } else if (c >= 0x20 && c < 0x7f) {
        out += static_cast<char>(c);
      } else {
        out += "\\x";
        out += kHex[c >> 4];
        out += kHex[c & 0xf];
      }
    }
    out += '"';
    if (shown < length) out += "...";
    return copy_out(out, buf, size, length_out);
  });
}

void memcg_options_init(memcg_options* options) {
  if (options == nullptr) return;
  const memcg::Options defaults;
  options->size = sizeof(memcg_options);
  options->unit_shift = defaults.unit_shift;
  options->batch = defaults.batch;
  options->nr_shards = defaults.nr_shards;
  options->recursive_protection = defaults.recursive_protection ? 1 : 0;
  options->local_events = defaults.local_events ? 1 : 0;
}

int memcg_controller_create(const memcg_options* options, memcg_controller** out) {
  if (out == nullptr) return EINVAL;
  // A program built with an older header passes a shorter struct: it must at least hold the
  // fields of this version's first release, which are all there are so far.
  if (options != nullptr && options->size < sizeof(memcg_options)) return EINVAL;
  return guarded([&] {
    memcg::Options o;
    if (options != nullptr) {
      o.unit_shift = options->unit_shift;
      o.batch = options->batch;
      o.nr_shards = options->nr_shards;
      o.recursive_protection = options->recursive_protection != 0;
      o.local_events = options->local_events != 0;
    }
    *out = new memcg_controller(std::move(o));  // std::invalid_argument for bad options
    return 0;
  });
}

int memcg_controller_destroy(memcg_controller* controller) {
  if (controller == nullptr) return 0;
  if (controller->handles.load(std::memory_order_relaxed) != 0) return EBUSY;
  delete controller;
  return 0;
}

uint64_t memcg_controller_now_ns(const memcg_controller* controller) {
  return controller == nullptr ? 0 : controller->cpp.clock().now_ns();
}

int memcg_group_create(memcg_controller* controller, const char* path, memcg_group** out) {
  if (controller == nullptr || path == nullptr) return EINVAL;
  return guarded([&] {
    // The handle first, so that a failed allocation leaves no group behind.
    std::unique_ptr<memcg_group> handle;
    if (out != nullptr) handle = std::make_unique<memcg_group>(controller, memcg::GroupRef());
    memcg::GroupRef ref;
    if (int err = controller->cpp.create(path, &ref)) return err;
    if (out != nullptr) {
      handle->ref = std::move(ref);
      *out = handle.release();
    }
    return 0;
  });
}

int memcg_group_lookup(memcg_controller* controller, const char* path, memcg_group** out) {
  if (controller == nullptr || path == nullptr || out == nullptr) return EINVAL;
  return guarded([&] {
    memcg::GroupRef ref = controller->cpp.lookup(path);
    if (!ref) return ENOENT;
    *out = new memcg_group(controller, std::move(ref));
    return 0;
  });
}

int memcg_group_remove(memcg_controller* controller, const char* path) {
  if (controller == nullptr || path == nullptr) return EINVAL;
  return guarded([&] { return controller->cpp.remove(path); });
}

void memcg_group_release(memcg_group* group) { delete group; }

int memcg_group_path(const memcg_group* group, char* buf, size_t size, size_t* length) {
  if (group == nullptr) return EINVAL;
  return guarded([&] { return copy_out(group->ref->path(), buf, size, length); });
}

int memcg_group_read(memcg_group* group, const char* name, char* buf, size_t size,
                     size_t* length) {
  if (group == nullptr || name == nullptr) return EINVAL;
  return guarded([&] {
    std::string text;
    if (int err = memcg::read_file(*group->ref, name, &text)) return err;
    return copy_out(text, buf, size, length);
  });
}

int memcg_group_write(memcg_group* group, const char* name, const char* text, size_t length,
                      int nonblocking) {
  if (group == nullptr || name == nullptr || (text == nullptr && length != 0)) return EINVAL;
  // The files' parsers read a std::string_view, but a NUL inside the given length would still
  // cut the value short wherever a C string is made of it (and no file's text holds one).
  if (length != 0 && std::memchr(text, '\0', length) != nullptr) return EINVAL;
  return guarded([&] {
    return memcg::write_file(*group->ref, name, std::string_view(text, length), nonblocking != 0);
  });
}

}  // extern "C"
