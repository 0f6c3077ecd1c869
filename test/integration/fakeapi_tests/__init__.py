"""The tests of the fake API server (fakeapi/), one module per concern; fake_apiserver_test.py
collects them."""
