// The identifier checks of claims the kubelet names (issue 15 item 3): table cases at and beyond
// each limit.
#include "driver/prepare/identifiers.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace topodra::prepare {
namespace {

const std::string kUuid = "8d4e5c1a-0b6f-4f2e-9a43-1c2d3e4f5a6b";

TEST(ShowValueTest, QuotesShortValuesAndBoundsLongOnes) {
  EXPECT_EQ(ShowValue("default"), "\"default\"");
  EXPECT_EQ(ShowValue(""), "\"\"");
  EXPECT_EQ(ShowValue("a\"b\n\x01"), "\"a\\\"b\\n\\x01\"");
  EXPECT_EQ(ShowValue(std::string(64, 'x')), absl::StrCat("\"", std::string(64, 'x'), "\""));
  EXPECT_EQ(ShowValue(std::string(65, 'x')),
            absl::StrCat("\"", std::string(64, 'x'), "...\" (65 bytes)"));
  EXPECT_EQ(ShowValue(std::string(1 << 20, 'y'), 4), "\"yyyy...\" (1048576 bytes)");
}

TEST(ShowClaimRefTest, PlainIdentifiersAsTheyAreOthersBounded) {
  EXPECT_EQ(ShowClaimRef("default", "gpu-claim.a"), "default/gpu-claim.a");
  EXPECT_EQ(ShowClaimRef("Default", "c"), "\"Default\"/c");
  EXPECT_EQ(ShowClaimRef("ns", std::string(300, 'a')),
            absl::StrCat("ns/\"", std::string(64, 'a'), "...\" (300 bytes)"));
  EXPECT_EQ(ShowClaimRef("", ""), "\"\"/\"\"");
}

struct Case {
  std::string ns, name, uid;
  std::string error;  // "" for valid
};

TEST(ValidateClaimIdentityTest, Table) {
  const std::string label63(63, 'a');
  const std::string name253 = absl::StrCat(std::string(63, 'b'), ".", std::string(63, 'c'), ".",
                                           std::string(63, 'd'), ".", std::string(61, 'e'));
  ASSERT_EQ(name253.size(), 253u);
  const std::vector<Case> cases = {
      {"default", "claim", kUuid, ""},
      {"default", "claim", "uid-a", ""},  // short uids (tests, simulators) are fine
      {label63, "claim", kUuid, ""},
      {"a", name253, kUuid, ""},
      {"kube-system", "pod-1-gpu.extended-resources-x7k2p", kUuid, ""},
      {"default", "claim", std::string(128, 'f'), ""},
      {"default", "0", "0", ""},
      {"", "claim", kUuid, "namespace, name and uid are required"},
      {"default", "", kUuid, "namespace, name and uid are required"},
      {"default", "claim", "", "namespace, name and uid are required"},
      {label63 + "a", "claim", kUuid,
       absl::StrCat("namespace \"", label63,
                    "a\" is longer than 63 characters, the limit of a namespace (a DNS-1123 "
                    "label)")},
      {"Default", "claim", kUuid,
       "namespace \"Default\" is not a DNS-1123 label (lower-case letters, digits and '-', "
       "starting and ending with a letter or digit)"},
      {"-ns", "claim", kUuid, "namespace \"-ns\" is not a DNS-1123 label"},
      {"ns-", "claim", kUuid, "namespace \"ns-\" is not a DNS-1123 label"},
      {"a.b", "claim", kUuid, "namespace \"a.b\" is not a DNS-1123 label"},
      {"default", name253 + "e", kUuid,
       absl::StrCat("name \"", name253.substr(0, 64),
                    "...\" (254 bytes) is longer than 253 characters, the limit of a "
                    "ResourceClaim name (a DNS-1123 subdomain)")},
      {"default", "a..b", kUuid,
       "name \"a..b\" is not a DNS-1123 subdomain (lower-case letters, digits, '-' and '.', each "
       "dot-separated part starting and ending with a letter or digit)"},
      {"default", ".a", kUuid, "name \".a\" is not a DNS-1123 subdomain"},
      {"default", "a.", kUuid, "name \"a.\" is not a DNS-1123 subdomain"},
      {"default", "a/b", kUuid, "name \"a/b\" is not a DNS-1123 subdomain"},
      {"default", "a-.b", kUuid, "name \"a-.b\" is not a DNS-1123 subdomain"},
      {"default", "a\nb", kUuid, "name \"a\\nb\" is not a DNS-1123 subdomain"},
      {"default", "claim", std::string(129, 'f'),
       absl::StrCat("uid \"", std::string(64, 'f'),
                    "...\" (129 bytes) is longer than 128 characters (the API server's uids are "
                    "36-character UUIDs)")},
      {"default", "claim", "../x",
       "uid \"../x\" has characters other than letters, digits and '-' (the API server's uids "
       "are UUIDs)"},
      {"default", "claim", "a b", "uid \"a b\" has characters other than letters"},
      {"default", "claim", "a_b", "uid \"a_b\" has characters other than letters"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrCat(ShowValue(c.ns), "/", ShowValue(c.name), " ", ShowValue(c.uid)));
    const absl::Status st = ValidateClaimIdentity(c.ns, c.name, c.uid);
    if (c.error.empty()) {
      EXPECT_TRUE(st.ok()) << st;
      continue;
    }
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    // The full message for the cases that spell it out, its start for the others.
    EXPECT_EQ(std::string(st.message()).substr(0, c.error.size()), c.error);
  }
}

TEST(ValidateClaimIdentityTest, AMegabyteNameGivesAShortMessage) {
  const absl::Status st = ValidateClaimIdentity("default", std::string(1 << 20, 'a'), kUuid);
  EXPECT_EQ(st.message(), absl::StrCat("name \"", std::string(64, 'a'),
                                       "...\" (1048576 bytes) is longer than 253 characters, the "
                                       "limit of a ResourceClaim name (a DNS-1123 subdomain)"));
}

}  // namespace
}  // namespace topodra::prepare
