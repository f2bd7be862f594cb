#include "server/textproto.h"

#include <fmt/format.h>
#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include "formats/file.h"

namespace sluice {
namespace {

// Keeps the first error, 1-based like a compiler's; warnings are not errors.
class FirstErrorCollector : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, int column, const std::string& message) override {
    if (first_.empty()) first_ = fmt::format("{}:{}: {}", line + 1, column + 1, message);
  }
  [[nodiscard]] const std::string& first() const { return first_; }

 private:
  std::string first_;
};

}  // namespace

Status ParseTextProtoFile(const std::string& path, google::protobuf::Message* out) {
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  FirstErrorCollector errors;
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(text, out)) {
    if (errors.first().empty()) {
      return InvalidArgument(path + ": not a text-format " + out->GetTypeName());
    }
    return InvalidArgument(path + ":" + errors.first());
  }
  return Status::OK();
}

}  // namespace sluice
