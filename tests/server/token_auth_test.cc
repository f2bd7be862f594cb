// The bearer-token check every call passes before gRPC reads its message.
#include "server/token_auth.h"

#include <catch2/catch.hpp>

#include <string_view>
#include <vector>

namespace sluice {
namespace {

using Headers = std::vector<std::string_view>;

TEST_CASE("NoTokenConfiguredLetsEveryCallThrough") {
  CHECK(CheckBearerToken({}, "").ok());
  CHECK(CheckBearerToken(Headers{"Bearer anything", "Bearer else"}, "").ok());
}

TEST_CASE("TheSchemeIsMatchedInAnyCaseAndTheTokenExactly") {
  CHECK(CheckBearerToken(Headers{"Bearer s3cret"}, "s3cret").ok());
  CHECK(CheckBearerToken(Headers{"bearer s3cret"}, "s3cret").ok());
  CHECK(CheckBearerToken(Headers{"BEARER s3cret"}, "s3cret").ok());
  for (std::string_view bad : {"Bearer s3cre", "Bearer s3cret!", "Bearer S3CRET", "Bearer ",
                               "Bearer", "Basic s3cret", "s3cret", "Bearer  s3cret", ""}) {
    INFO(bad);
    const Status s = CheckBearerToken(Headers{bad}, "s3cret");
    CHECK(s.code() == StatusCode::kUnauthenticated);
    CHECK(s.message().find("not the one this server accepts") != std::string::npos);
  }
}

TEST_CASE("MissingOrDuplicateAuthorizationHeadersAreRefusedSayingWhich") {
  const Status none = CheckBearerToken({}, "s3cret");
  CHECK(none.code() == StatusCode::kUnauthenticated);
  CHECK(none.message().find("needs a token") != std::string::npos);
  const Status two = CheckBearerToken(Headers{"Bearer s3cret", "Bearer s3cret"}, "s3cret");
  CHECK(two.code() == StatusCode::kUnauthenticated);
  CHECK(two.message().find("more than one authorization header") != std::string::npos);
}

}  // namespace
}  // namespace sluice
