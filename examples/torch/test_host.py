#!/usr/bin/env python3
"""Host test of gpucomm_torch.py's glue that needs no GPU and no build: the extension replaced by a
stand-in (and torch too, where it is not installed), run by CTest (example_torch.host).

Communicator.synchronize raises gpucomm's report itself: the extension returns it as a str ("" when
there is nothing to report)."""
import os
import sys
import types
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.modules["_gpucomm_torch"] = types.ModuleType("_gpucomm_torch")
try:
    import torch  # noqa: F401
except ImportError:

    class _Anything(types.ModuleType):
        def __getattr__(self, name):
            return f"{self.__name__}.{name}"

    sys.modules["torch"] = _Anything("torch")
    sys.modules["torch.distributed"] = sys.modules["torch"].distributed = _Anything("torch.distributed")
import gpucomm_torch  # noqa: E402


class FakeCore:
    """The binding's Communicator as synchronize sees it: synchronize returns gpucomm's report."""

    def __init__(self, reports):
        self.reports = list(reports)
        self.closed = False

    def synchronize(self):
        return self.reports.pop(0)


def communicator(reports):
    c = gpucomm_torch.Communicator.__new__(gpucomm_torch.Communicator)
    c._impl = FakeCore(reports)
    return c


class SynchronizeTest(unittest.TestCase):
    def test_nothing_to_report_returns_none(self):
        self.assertIsNone(communicator([""]).synchronize())

    def test_a_report_is_raised_as_runtime_error(self):
        report = "gpucomm: gpucomm::moe_dispatch on PE 0: 5 received rows past max_recv_rows (40) were dropped"
        c = communicator([report, ""])
        with self.assertRaises(RuntimeError) as raised:
            c.synchronize()
        self.assertEqual(str(raised.exception), report)
        self.assertIsNone(c.synchronize())  # reported once


if __name__ == "__main__":
    unittest.main()
