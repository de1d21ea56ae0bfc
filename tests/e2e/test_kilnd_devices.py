"""kilnd --list-devices: the devices discovery finds, checked against what the machine reports independently
(clinfo for OpenCL devices; CUDA is absent on machines without libcuda/a GPU, as here in CI)."""

from __future__ import annotations

import os
import shutil
import subprocess


def test_list_devices_matches_the_machine():
    out = subprocess.run([os.environ["KILND"], "--list-devices"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    devices = out.stdout.split()
    assert "CPU" in devices
    assert len(devices) == len(set(devices))
    if shutil.which("clinfo"):
        listed = subprocess.run(["clinfo", "-l"], capture_output=True, text=True, timeout=60).stdout
        n_cl = sum(1 for line in listed.splitlines() if "Device #" in line)
        assert sorted(d for d in devices if d.startswith("CL")) == [f"CL:{i}" for i in range(min(n_cl, 16))]
    gpu_visible = os.path.exists("/dev/nvidia0")
    assert any(d.startswith("CUDA") for d in devices) == gpu_visible
