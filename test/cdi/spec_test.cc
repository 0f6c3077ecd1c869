#include "cdi/spec.h"

#include <functional>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace topodra::cdi {
namespace {

// The shape of a GPU claim spec: what topodra writes, valid at 0.5.0.
Spec GpuSpec() {
  Spec spec;
  spec.cdi_version = "0.5.0";
  spec.kind = "k8s.topodra.io/gpu";
  Device gpu;
  gpu.name = "0a1b2c3d-gpu-0000-3b-00-0";
  gpu.container_edits.env = {"NVIDIA_VISIBLE_DEVICES=0"};
  DeviceNode nvidia0;
  nvidia0.path = "/dev/nvidia0";
  nvidia0.host_path = "/dev/nvidia0";
  nvidia0.type = "c";
  nvidia0.major = 195;
  nvidia0.minor = 0;
  nvidia0.file_mode = 0666;
  nvidia0.permissions = "rw";
  nvidia0.uid = 0;
  nvidia0.gid = 0;
  gpu.container_edits.device_nodes = {nvidia0};
  spec.devices = {gpu};
  spec.container_edits.device_nodes = {{.path = "/dev/nvidiactl"}};
  return spec;
}

// Every field of the format, so the round trip covers every key.
Spec FullSpec() {
  Spec spec = GpuSpec();
  spec.cdi_version = "1.1.0";
  spec.annotations = {{"topodra.io/claim", "default/gpu"}};
  Device& gpu = spec.devices[0];
  gpu.annotations = {{"note", "x"}};
  ContainerEdits& edits = gpu.container_edits;
  edits.mounts = {{.host_path = "/usr/lib/libcuda.so",
                   .container_path = "/usr/lib/libcuda.so",
                   .options = {"ro", "bind"},
                   .type = "bind"}};
  edits.hooks = {{.hook_name = "createContainer",
                  .path = "/usr/bin/nvidia-ctk",
                  .args = {"nvidia-ctk", "hook", "update-ldcache"},
                  .env = {"DEBUG=1"},
                  .timeout = 10}};
  edits.additional_gids = {44, 0};
  edits.intel_rdt = IntelRdt{.clos_id = "clos1",
                             .l3_cache_schema = "L3:0=ff",
                             .mem_bw_schema = "MB:0=50",
                             .schemata = {"L3:0=ff"},
                             .enable_monitoring = true};
  edits.net_devices = {{.host_interface_name = "eth1", .name = "net0"}};
  return spec;
}

TEST(CdiJsonTest, WritesOnlySetFieldsWithTheFormatsKeys) {
  Spec spec = GpuSpec();
  spec.devices[0].container_edits.additional_gids = {44};
  spec.devices[0].container_edits.intel_rdt = IntelRdt{.schemata = {"L3:0=f"}};
  EXPECT_EQ(ToJsonText(spec, -1),
            R"({"cdiVersion":"0.5.0","containerEdits":{"deviceNodes":[{"path":"/dev/nvidiactl"}]},)"
            R"("devices":[{"containerEdits":{"additionalGids":[44],"deviceNodes":[{"fileMode":438,)"
            R"("gid":0,"hostPath":"/dev/nvidia0","major":195,"minor":0,"path":"/dev/nvidia0",)"
            R"("permissions":"rw","type":"c","uid":0}],"env":["NVIDIA_VISIBLE_DEVICES=0"],)"
            R"("intelRdt":{"schemata":["L3:0=f"]}},"name":"0a1b2c3d-gpu-0000-3b-00-0"}],)"
            R"("kind":"k8s.topodra.io/gpu"})");
}

TEST(CdiJsonTest, EmptyTopLevelEditsAreLeftOut) {
  Spec spec = GpuSpec();
  spec.container_edits = {};
  EXPECT_EQ(ToJson(spec).count("containerEdits"), 0u);
  EXPECT_EQ(ToJson(spec)["devices"][0].count("containerEdits"), 1u);
}

TEST(CdiJsonTest, RoundTripsEveryField) {
  for (const Spec& spec : {GpuSpec(), FullSpec()}) {
    ASSERT_TRUE(Validate(spec).ok()) << Validate(spec);
    for (int indent : {-1, 2}) {
      absl::StatusOr<Spec> back = FromJson(ToJsonText(spec, indent));
      ASSERT_TRUE(back.ok()) << back.status();
      EXPECT_EQ(*back, spec);
    }
  }
  EXPECT_EQ(ToJson(FullSpec())["devices"][0]["containerEdits"]["intelRdt"].dump(),
            R"({"closID":"clos1","enableMonitoring":true,"l3CacheSchema":"L3:0=ff",)"
            R"("memBwSchema":"MB:0=50","schemata":["L3:0=ff"]})");
}

TEST(CdiJsonTest, InvalidUtf8DoesNotThrow) {
  Spec spec = GpuSpec();
  spec.devices[0].container_edits.env = {"A=\xff"};
  EXPECT_EQ(ToJson(spec)["devices"][0]["containerEdits"]["env"][0].get<std::string>(), "A=\xff");
  EXPECT_NE(ToJsonText(spec).find("A=\xEF\xBF\xBD"), std::string::npos);
}

struct ParseCase {
  std::string name;
  std::string text;
  std::string error;
};

void PrintTo(const ParseCase& c, std::ostream* os) { *os << c.name; }

class CdiParseErrorTest : public testing::TestWithParam<ParseCase> {};

TEST_P(CdiParseErrorTest, NamesThePath) {
  absl::StatusOr<Spec> spec = FromJson(GetParam().text);
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(spec.status().message()), GetParam().error);
}

const std::string kEdits = R"({"devices":[{"name":"a","containerEdits":)";

INSTANTIATE_TEST_SUITE_P(
    Cases, CdiParseErrorTest,
    testing::Values(
        ParseCase{"Empty", "",
                  "malformed JSON: parse error at line 1, column 1: syntax error while parsing "
                  "value - unexpected end of input; expected '[', '{', or a literal"},
        ParseCase{"Truncated", R"({"kind": "a/b")",
                  "malformed JSON: parse error at line 1, column 15: syntax error while parsing "
                  "object - unexpected end of input; expected '}'"},
        ParseCase{"TrailingGarbage", R"({} x)",
                  "malformed JSON: parse error at line 1, column 4: syntax error while parsing "
                  "value - invalid literal; last read: '{} x'; expected end of input"},
        ParseCase{"NotAnObject", "[]", "spec: must be an object, not array"},
        ParseCase{"UnknownTopLevel", R"({"cdiVersion":"0.3.0","kinds":"a/b"})",
                  "kinds: unknown field"},
        ParseCase{"CaseMatters", R"({"CDIVersion":"0.3.0"})", "CDIVersion: unknown field"},
        ParseCase{"UnknownNested",
                  kEdits + R"({"deviceNodes":[{"path":"/dev/a"},{"path":"/dev/b","mode":1}]}}]})",
                  "devices[0].containerEdits.deviceNodes[1].mode: unknown field"},
        ParseCase{"SpecSpelling", kEdits + R"({"additionalGIDs":[1]}}]})",
                  "devices[0].containerEdits.additionalGIDs: unknown field"},
        ParseCase{"RdtSchemaSpelling", kEdits + R"({"intelRdt":{"schema":["x"]}}}]})",
                  "devices[0].containerEdits.intelRdt.schema: unknown field"},
        ParseCase{"DroppedEnableCmt", kEdits + R"({"intelRdt":{"enableCMT":true}}}]})",
                  "devices[0].containerEdits.intelRdt.enableCMT: unknown field"},
        ParseCase{"UnknownInDevice", R"({"devices":[{"name":"a","edits":{}}]})",
                  "devices[0].edits: unknown field"},
        ParseCase{"UnknownInTopEdits", R"({"containerEdits":{"mounts":[{"hostPath":"/a","x":1}]}})",
                  "containerEdits.mounts[0].x: unknown field"},
        ParseCase{"UnknownInHook", kEdits + R"({"hooks":[{"hookName":"prestart","when":1}]}}]})",
                  "devices[0].containerEdits.hooks[0].when: unknown field"},
        ParseCase{"UnknownInNetDevice", kEdits + R"({"netDevices":[{"name":"a","mac":"x"}]}}]})",
                  "devices[0].containerEdits.netDevices[0].mac: unknown field"},
        ParseCase{"VersionNotString", R"({"cdiVersion":0.3})",
                  "cdiVersion: must be a string, not number"},
        ParseCase{"NullString", R"({"kind":null})", "kind: must be a string, not null"},
        ParseCase{"DevicesNotList", R"({"devices":{}})", "devices: must be a list, not object"},
        ParseCase{"DeviceNotObject", R"({"devices":["a"]})",
                  "devices[0]: must be an object, not string"},
        ParseCase{"EnvNotStrings", kEdits + R"({"env":["A=1",2]}}]})",
                  "devices[0].containerEdits.env[1]: must be a string, not number"},
        ParseCase{"AnnotationNotString", R"({"annotations":{"a":1}})",
                  "annotations[\"a\"]: must be a string, not number"},
        ParseCase{"MajorFloat", kEdits + R"({"deviceNodes":[{"path":"/a","major":1.5}]}}]})",
                  "devices[0].containerEdits.deviceNodes[0].major: must be an integer, not 1.5"},
        ParseCase{"MajorHuge",
                  kEdits + R"({"deviceNodes":[{"path":"/a","major":9223372036854775808}]}}]})",
                  "devices[0].containerEdits.deviceNodes[0].major: integer 9223372036854775808 is "
                  "out of range"},
        ParseCase{"UidNegative", kEdits + R"({"deviceNodes":[{"path":"/a","uid":-1}]}}]})",
                  "devices[0].containerEdits.deviceNodes[0].uid: integer -1 is out of range "
                  "0..4294967295"},
        ParseCase{"FileModeTooBig",
                  kEdits + R"({"deviceNodes":[{"path":"/a","fileMode":4294967296}]}}]})",
                  "devices[0].containerEdits.deviceNodes[0].fileMode: integer 4294967296 is out "
                  "of range 0..4294967295"},
        ParseCase{"GidString", kEdits + R"({"additionalGids":["44"]}}]})",
                  "devices[0].containerEdits.additionalGids[0]: must be an integer, not \"44\""},
        ParseCase{"TimeoutString", kEdits + R"({"hooks":[{"timeout":"5s"}]}}]})",
                  "devices[0].containerEdits.hooks[0].timeout: must be an integer, not \"5s\""},
        ParseCase{"MonitoringNotBool", kEdits + R"({"intelRdt":{"enableMonitoring":1}}}]})",
                  "devices[0].containerEdits.intelRdt.enableMonitoring: must be a boolean, not "
                  "number"},
        ParseCase{"TooDeep", std::string(40, '[') + std::string(40, ']'),
                  "malformed JSON: nested deeper than 16 levels"},
        ParseCase{"TooBig", std::string(kMaxSpecBytes + 1, ' '),
                  "spec of 4194305 bytes is larger than the limit of 4194304"}),
    [](const testing::TestParamInfo<ParseCase>& info) { return info.param.name; });

TEST(CdiJsonTest, MissingFieldsParseAndFailValidation) {
  absl::StatusOr<Spec> spec = FromJson(R"({"cdiVersion":"0.3.0","kind":"a/b"})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(Validate(*spec).message(), "devices: a spec needs at least one device");
}

struct ValidationCase {
  std::string name;
  std::function<void(Spec&)> change;
  std::string error;  // "" for a valid spec
};

void PrintTo(const ValidationCase& c, std::ostream* os) { *os << c.name; }

class CdiValidationTest : public testing::TestWithParam<ValidationCase> {};

TEST_P(CdiValidationTest, Rule) {
  Spec spec = GpuSpec();
  GetParam().change(spec);
  absl::Status st = Validate(spec);
  if (GetParam().error.empty()) {
    EXPECT_TRUE(st.ok()) << st;
  } else {
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(std::string(st.message()), GetParam().error);
  }
}

ContainerEdits& Edits(Spec& spec) { return spec.devices[0].container_edits; }
DeviceNode& Node(Spec& spec) { return Edits(spec).device_nodes[0]; }
Hook& AddHook(Spec& spec) {
  Edits(spec).hooks.push_back({.hook_name = "createContainer", .path = "/bin/hook"});
  return Edits(spec).hooks.back();
}

INSTANTIATE_TEST_SUITE_P(
    Cases, CdiValidationTest,
    testing::Values(
        ValidationCase{"Valid", [](Spec&) {}, ""},
        ValidationCase{"UnknownVersion", [](Spec& s) { s.cdi_version = "0.9.0"; },
                       "cdiVersion: unknown version \"0.9.0\", want 0.1.0, 0.2.0, 0.3.0, 0.4.0, "
                       "0.5.0, 0.6.0, 0.7.0, 0.8.0, 1.0.0, 1.1.0"},
        ValidationCase{"VersionWithV", [](Spec& s) { s.cdi_version = "v0.5.0"; },
                       "cdiVersion: unknown version \"v0.5.0\", want 0.1.0, 0.2.0, 0.3.0, 0.4.0, "
                       "0.5.0, 0.6.0, 0.7.0, 0.8.0, 1.0.0, 1.1.0"},
        ValidationCase{"VersionTooLowForHostPath", [](Spec& s) { s.cdi_version = "0.4.0"; },
                       "cdiVersion: version \"0.4.0\" is lower than \"0.5.0\", which "
                       "devices[0].name needs"},
        ValidationCase{
            "BaselineIsThree",
            [](Spec& s) {
              s.cdi_version = "0.2.0";
              s.devices[0].name = "gpu0";
              Node(s).host_path.clear();
            },
            "cdiVersion: version \"0.2.0\" is lower than \"0.3.0\", which every spec needs"},
        ValidationCase{"VersionTooLowForHostPathOnly",
                       [](Spec& s) {
                         s.cdi_version = "0.4.0";
                         s.devices[0].name = "gpu0";
                       },
                       "cdiVersion: version \"0.4.0\" is lower than \"0.5.0\", which "
                       "devices[0].containerEdits.deviceNodes[0].hostPath needs"},
        ValidationCase{"HigherVersionIsFine", [](Spec& s) { s.cdi_version = "1.1.0"; }, ""},
        ValidationCase{"KindWithoutSlash", [](Spec& s) { s.kind = "k8s.topodra.io"; },
                       "kind: invalid kind \"k8s.topodra.io\": want <vendor>/<class>"},
        ValidationCase{"EmptyVendor", [](Spec& s) { s.kind = "/gpu"; },
                       "kind: invalid kind \"/gpu\": empty vendor"},
        ValidationCase{"VendorStartsWithDigit", [](Spec& s) { s.kind = "8s.io/gpu"; },
                       "kind: invalid kind \"8s.io/gpu\": invalid vendor \"8s.io\": must start "
                       "with a letter"},
        ValidationCase{"VendorBadChar", [](Spec& s) { s.kind = "k8s+x.io/gpu"; },
                       "kind: invalid kind \"k8s+x.io/gpu\": invalid vendor \"k8s+x.io\": "
                       "character \"+\" is not allowed"},
        ValidationCase{"VendorEndsWithDot", [](Spec& s) { s.kind = "topodra./gpu"; },
                       "kind: invalid kind \"topodra./gpu\": invalid vendor \"topodra.\": must "
                       "end with a letter or digit"},
        ValidationCase{"EmptyClass", [](Spec& s) { s.kind = "topodra.io/"; },
                       "kind: invalid kind \"topodra.io/\": empty class"},
        ValidationCase{"ClassSlash", [](Spec& s) { s.kind = "topodra.io/gpu/x"; },
                       "kind: invalid kind \"topodra.io/gpu/x\": invalid class \"gpu/x\": "
                       "character \"/\" is not allowed"},
        ValidationCase{"ClassStartsWithDigit", [](Spec& s) { s.kind = "topodra.io/3d"; },
                       "kind: invalid kind \"topodra.io/3d\": invalid class \"3d\": must start "
                       "with a letter"},
        ValidationCase{"ClassTooLong", [](Spec& s) { s.kind = "a/" + std::string(64, 'c'); },
                       "kind: invalid kind \"a/" + std::string(64, 'c') + "\": invalid class \"" +
                           std::string(64, 'c') + "\": longer than 63 characters"},
        ValidationCase{"ClassDotNeedsSix", [](Spec& s) { s.kind = "topodra.io/gpu.big"; },
                       "cdiVersion: version \"0.5.0\" is lower than \"0.6.0\", which kind needs"},
        ValidationCase{"NoDevices", [](Spec& s) { s.devices.clear(); },
                       "devices: a spec needs at least one device"},
        ValidationCase{"EmptyDeviceName", [](Spec& s) { s.devices[0].name = ""; },
                       "devices[0].name: empty device name"},
        ValidationCase{"DeviceNameStartsWithDash", [](Spec& s) { s.devices[0].name = "-gpu"; },
                       "devices[0].name: invalid device name \"-gpu\": must start with a letter "
                       "or digit"},
        ValidationCase{"DeviceNameEndsWithColon", [](Spec& s) { s.devices[0].name = "gpu:"; },
                       "devices[0].name: invalid device name \"gpu:\": must end with a letter or "
                       "digit"},
        ValidationCase{"DeviceNameSlash", [](Spec& s) { s.devices[0].name = "a/b"; },
                       "devices[0].name: invalid device name \"a/b\": character \"/\" is not "
                       "allowed"},
        ValidationCase{"DeviceNameColonDot", [](Spec& s) { s.devices[0].name = "mig:1.2_x-y"; },
                       ""},
        ValidationCase{"DuplicateDevice", [](Spec& s) { s.devices.push_back(s.devices[0]); },
                       "devices[1].name: duplicate device name \"0a1b2c3d-gpu-0000-3b-00-0\""},
        ValidationCase{"EmptyDeviceEdits", [](Spec& s) { Edits(s) = {}; },
                       "devices[0].containerEdits: device \"0a1b2c3d-gpu-0000-3b-00-0\" has no "
                       "container edits"},
        ValidationCase{"OnlyGidsAreEdits",
                       [](Spec& s) {
                         s.cdi_version = "0.7.0";
                         Edits(s) = {};
                         Edits(s).additional_gids = {44};
                       },
                       ""},
        ValidationCase{"EnvWithoutEquals",
                       [](Spec& s) {
                         Edits(s).env = {"A=1", "B"};
                       },
                       "devices[0].containerEdits.env[1]: invalid environment variable \"B\": "
                       "want NAME=value with a non-empty NAME"},
        ValidationCase{"EnvEmptyName", [](Spec& s) { s.container_edits.env = {"=1"}; },
                       "containerEdits.env[0]: invalid environment variable \"=1\": want "
                       "NAME=value with a non-empty NAME"},
        ValidationCase{"EnvEmptyValue", [](Spec& s) { Edits(s).env = {"A="}; }, ""},
        ValidationCase{"NodeWithoutPath", [](Spec& s) { Node(s).path = ""; },
                       "devices[0].containerEdits.deviceNodes[0].path: empty device path"},
        ValidationCase{"NodeBadType", [](Spec& s) { Node(s).type = "x"; },
                       "devices[0].containerEdits.deviceNodes[0].type: invalid device type \"x\" "
                       "of \"/dev/nvidia0\": want b, c, u or p"},
        ValidationCase{"NodeTypes",
                       [](Spec& s) {
                         for (const char* t : {"b", "u", "p", ""}) {
                           Edits(s).device_nodes.push_back({.path = "/dev/x", .type = t});
                         }
                       },
                       ""},
        ValidationCase{"NodeBadPermissions", [](Spec& s) { Node(s).permissions = "rx"; },
                       "devices[0].containerEdits.deviceNodes[0].permissions: invalid "
                       "permissions \"rx\" of \"/dev/nvidia0\": want letters of \"rwm\" or "
                       "\"none\""},
        ValidationCase{"NodePermissionsNone", [](Spec& s) { Node(s).permissions = "none"; }, ""},
        ValidationCase{"MountWithoutContainerPath",
                       [](Spec& s) { Edits(s).mounts = {{.host_path = "/lib/a.so"}}; },
                       "devices[0].containerEdits.mounts[0].containerPath: empty container path "
                       "of mount of \"/lib/a.so\""},
        ValidationCase{"MountWithoutHostPath",
                       [](Spec& s) { Edits(s).mounts = {{.container_path = "/lib/a.so"}}; },
                       "devices[0].containerEdits.mounts[0].hostPath: empty host path of mount "
                       "at \"/lib/a.so\""},
        ValidationCase{"HookBadName", [](Spec& s) { AddHook(s).hook_name = "preStart"; },
                       "devices[0].containerEdits.hooks[0].hookName: invalid hook name "
                       "\"preStart\": want prestart, createRuntime, createContainer, "
                       "startContainer, poststart or poststop"},
        ValidationCase{"HookRelativePath", [](Spec& s) { AddHook(s).path = "bin/hook"; },
                       "devices[0].containerEdits.hooks[0].path: hook path \"bin/hook\" is not "
                       "absolute"},
        ValidationCase{"HookEmptyPath", [](Spec& s) { AddHook(s).path = ""; },
                       "devices[0].containerEdits.hooks[0].path: hook path \"\" is not absolute"},
        ValidationCase{"HookBadEnv", [](Spec& s) { AddHook(s).env = {"X"}; },
                       "devices[0].containerEdits.hooks[0].env[0]: invalid environment variable "
                       "\"X\": want NAME=value with a non-empty NAME"},
        ValidationCase{"HookZeroTimeout", [](Spec& s) { AddHook(s).timeout = 0; },
                       "devices[0].containerEdits.hooks[0].timeout: invalid hook timeout 0: must "
                       "be positive"},
        ValidationCase{"AllHookNames",
                       [](Spec& s) {
                         for (const char* name : {"prestart", "createRuntime", "createContainer",
                                                  "startContainer", "poststart", "poststop"}) {
                           AddHook(s).hook_name = name;
                         }
                       },
                       ""},
        ValidationCase{"RdtBadClos",
                       [](Spec& s) {
                         s.cdi_version = "0.7.0";
                         Edits(s).intel_rdt = IntelRdt{.clos_id = "a/b"};
                       },
                       "devices[0].containerEdits.intelRdt.closID: invalid closID \"a/b\": must "
                       "be a plain file name"},
        ValidationCase{"NetDeviceEmptyName",
                       [](Spec& s) {
                         s.cdi_version = "1.1.0";
                         Edits(s).net_devices = {{.host_interface_name = "eth0"}};
                       },
                       "devices[0].containerEdits.netDevices[0].name: empty interface name"},
        ValidationCase{"NetDeviceLongName",
                       [](Spec& s) {
                         s.cdi_version = "1.1.0";
                         Edits(s).net_devices = {
                             {.host_interface_name = "eth0123456789abc", .name = "n"}};
                       },
                       "devices[0].containerEdits.netDevices[0].hostInterfaceName: invalid "
                       "interface name \"eth0123456789abc\": longer than 15 bytes"},
        ValidationCase{"NetDeviceDuplicateHost",
                       [](Spec& s) {
                         s.cdi_version = "1.1.0";
                         Edits(s).net_devices = {{.host_interface_name = "eth0", .name = "a"},
                                                 {.host_interface_name = "eth0", .name = "b"}};
                       },
                       "devices[0].containerEdits.netDevices[1].hostInterfaceName: duplicate "
                       "host interface name \"eth0\""},
        ValidationCase{"NetDeviceDuplicateName",
                       [](Spec& s) {
                         s.cdi_version = "1.1.0";
                         Edits(s).net_devices = {{.host_interface_name = "eth0", .name = "a"},
                                                 {.host_interface_name = "eth1", .name = "a"}};
                       },
                       "devices[0].containerEdits.netDevices[1].name: duplicate interface name "
                       "\"a\""},
        ValidationCase{"AnnotationBadKey",
                       [](Spec& s) {
                         s.cdi_version = "0.6.0";
                         s.annotations = {{"bad key", "x"}};
                       },
                       "annotations[\"bad key\"]: invalid annotation key \"bad key\": character "
                       "\" \" is not allowed"},
        ValidationCase{"AnnotationUpperCasePrefix",
                       [](Spec& s) {
                         s.cdi_version = "0.6.0";
                         s.devices[0].annotations = {{"Topodra.io/x", "x"}};
                       },
                       "devices[0].annotations[\"Topodra.io/x\"]: invalid annotation key "
                       "\"Topodra.io/x\": character \"T\" is not allowed in a prefix"},
        ValidationCase{"AnnotationEmptyName",
                       [](Spec& s) {
                         s.cdi_version = "0.6.0";
                         s.annotations = {{"topodra.io/", "x"}};
                       },
                       "annotations[\"topodra.io/\"]: invalid annotation key \"topodra.io/\": "
                       "empty name"},
        ValidationCase{"AnnotationsTooBig",
                       [](Spec& s) {
                         s.cdi_version = "0.6.0";
                         s.annotations = {{"a", std::string(256 * 1024, 'x')}};
                       },
                       "annotations: annotations take 262145 bytes, more than the limit of "
                       "262144"},
        ValidationCase{"AnnotationsValid",
                       [](Spec& s) {
                         s.cdi_version = "0.6.0";
                         s.annotations = {{"topodra.io/claim-uid", "x"}, {"Note_1.a", ""}};
                       },
                       ""}),
    [](const testing::TestParamInfo<ValidationCase>& info) { return info.param.name; });

struct VersionCase {
  std::string name;
  std::function<void(Spec&)> change;
  std::string version;
};

void PrintTo(const VersionCase& c, std::ostream* os) { *os << c.name; }

class CdiMinimumVersionTest : public testing::TestWithParam<VersionCase> {};

TEST_P(CdiMinimumVersionTest, Field) {
  // Env only, a letter-led name: the 0.3.0 baseline before the change.
  Spec spec;
  spec.kind = "k8s.topodra.io/cpu";
  spec.devices = {{.name = "claim-1", .container_edits = {.env = {"A=1"}}}};
  GetParam().change(spec);
  EXPECT_EQ(MinimumVersion(spec), GetParam().version);
  // The minimum is always a valid choice, and the version below it never is.
  spec.cdi_version = GetParam().version;
  EXPECT_TRUE(Validate(spec).ok()) << Validate(spec);
  const std::vector<std::string>& known = KnownVersions();
  auto it = std::find(known.begin(), known.end(), GetParam().version);
  ASSERT_NE(it, known.end());
  spec.cdi_version = *(it - 1);
  EXPECT_FALSE(Validate(spec).ok());
}

Device& D0(Spec& s) { return s.devices[0]; }

INSTANTIATE_TEST_SUITE_P(
    Cases, CdiMinimumVersionTest,
    testing::Values(
        VersionCase{"EnvOnly", [](Spec&) {}, "0.3.0"},
        VersionCase{"HooksAndNodesAndMounts",
                    [](Spec& s) {
                      D0(s).container_edits.hooks = {{.hook_name = "prestart", .path = "/h"}};
                      D0(s).container_edits.device_nodes = {{.path = "/dev/a", .type = "c"}};
                      s.container_edits.mounts = {{.host_path = "/a", .container_path = "/a"}};
                    },
                    "0.3.0"},
        VersionCase{"MountType",
                    [](Spec& s) {
                      s.container_edits.mounts = {
                          {.host_path = "/a", .container_path = "/a", .type = "bind"}};
                    },
                    "0.4.0"},
        VersionCase{"HostPath",
                    [](Spec& s) {
                      D0(s).container_edits.device_nodes = {
                          {.path = "/dev/a", .host_path = "/dev/b"}};
                    },
                    "0.5.0"},
        VersionCase{"DigitLeadingName", [](Spec& s) { D0(s).name = "0a1b-gpu-0"; }, "0.5.0"},
        VersionCase{"SpecAnnotations",
                    [](Spec& s) {
                      s.annotations = {{"a", "b"}};
                    },
                    "0.6.0"},
        VersionCase{"DeviceAnnotations",
                    [](Spec& s) {
                      D0(s).annotations = {{"a", "b"}};
                    },
                    "0.6.0"},
        VersionCase{"DotInClass", [](Spec& s) { s.kind = "k8s.topodra.io/cpu.set"; }, "0.6.0"},
        VersionCase{"IntelRdt",
                    [](Spec& s) { D0(s).container_edits.intel_rdt = IntelRdt{.clos_id = "c"}; },
                    "0.7.0"},
        VersionCase{"AdditionalGids", [](Spec& s) { s.container_edits.additional_gids = {5}; },
                    "0.7.0"},
        VersionCase{"NetDevices",
                    [](Spec& s) {
                      D0(s).container_edits.net_devices = {
                          {.host_interface_name = "eth0", .name = "n0"}};
                    },
                    "1.1.0"},
        VersionCase{"Schemata",
                    [](Spec& s) { s.container_edits.intel_rdt = IntelRdt{.schemata = {"x"}}; },
                    "1.1.0"},
        VersionCase{
            "EnableMonitoring",
            [](Spec& s) { s.container_edits.intel_rdt = IntelRdt{.enable_monitoring = true}; },
            "1.1.0"},
        VersionCase{"HighestWins",
                    [](Spec& s) {
                      D0(s).name = "0x";
                      s.annotations = {{"a", "b"}};
                      s.container_edits.mounts = {
                          {.host_path = "/a", .container_path = "/a", .type = "bind"}};
                    },
                    "0.6.0"}),
    [](const testing::TestParamInfo<VersionCase>& info) { return info.param.name; });

TEST(CdiVersionTest, KnownVersions) {
  EXPECT_TRUE(IsKnownVersion("0.1.0"));
  EXPECT_TRUE(IsKnownVersion("0.8.0"));
  EXPECT_TRUE(IsKnownVersion("1.1.0"));
  EXPECT_FALSE(IsKnownVersion("1.2.0"));
  EXPECT_FALSE(IsKnownVersion("0.5"));
  EXPECT_FALSE(IsKnownVersion(""));
  EXPECT_EQ(KnownVersions().size(), 10u);
}

TEST(CdiNamesTest, QualifiedName) {
  EXPECT_EQ(*QualifiedName("k8s.topodra.io/gpu", "0a1b-gpu-0000-3b-00-0"),
            "k8s.topodra.io/gpu=0a1b-gpu-0000-3b-00-0");
  EXPECT_EQ(QualifiedName("k8s.topodra.io", "x").status().message(),
            "invalid kind \"k8s.topodra.io\": want <vendor>/<class>");
  EXPECT_EQ(QualifiedName("k8s.topodra.io/gpu", "a=b").status().message(),
            "invalid device name \"a=b\": character \"=\" is not allowed");
}

TEST(CdiNamesTest, TransientSpecFileName) {
  EXPECT_EQ(*TransientSpecFileName("k8s.topodra.io/cpu", "claim-0a1b"),
            "k8s.topodra.io-cpu_claim-0a1b.json");
  EXPECT_EQ(*TransientSpecFileName("k8s.topodra.io/gpu", "ns/name/x"),
            "k8s.topodra.io-gpu_ns_name_x.json");
  EXPECT_EQ(TransientSpecFileName("k8s.topodra.io/gpu", "").status().message(),
            "empty transient spec id");
  EXPECT_EQ(TransientSpecFileName("gpu", "x").status().message(),
            "invalid kind \"gpu\": want <vendor>/<class>");
  EXPECT_EQ(TransientSpecFileName("a/b", std::string("x\0y", 3)).status().message(),
            "invalid transient spec id \"x\\u0000y\": holds a NUL byte");
}

}  // namespace
}  // namespace topodra::cdi
