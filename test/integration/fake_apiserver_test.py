#!/usr/bin/python3
"""Tests of fake_apiserver.py: every rule the fake enforces has a test that fails without it.

The tests live in fakeapi_tests/, one module per concern of the fakeapi package; this module
collects them so that one command runs them all.

Run from this directory: /usr/bin/python3 -m unittest -v fake_apiserver_test
"""

import unittest

from fakeapi_tests.store_test import (CrudTest, SelectorTest, DryRunTest, WatchTest,
                                      HistoryWindowTest, WipeAndRestartTest, VersionsTest,
                                      OnlyV1Test, UnconditionalUpdateTest)  # noqa: F401
from fakeapi_tests.slices_test import (ValidationTest, QuantityTest, FieldValidationTest,
                                       MixinsAcceptTest, DeviceTaintsDropTest, PoolChecksTest,
                                       SpecRulesTest)  # noqa: F401
from fakeapi_tests.claims_test import (ClaimCrudTest, ClaimPathsTest, ClaimValidationTest,
                                       DeviceClassTest)  # noqa: F401
from fakeapi_tests.crd_test import (CrdCrudTest, CrdStatusTest, CrdValidationTest, WidgetCrdTest,
                                    CrdLoadTest, CelTest)  # noqa: F401
from fakeapi_tests.kubectl_support_test import (KubectlSupportTest, TableOfItemsFieldTest,
                                                SmpDirectiveTest)  # noqa: F401
from fakeapi_tests.layout_test import PackageLayoutTest  # noqa: F401
from fakeapi_tests.server_test import (FailureInjectionTest, RobustnessTest, HangTest, TlsTest,
                                       CommandLineTest)  # noqa: F401

if __name__ == "__main__":
    unittest.main(verbosity=2)
