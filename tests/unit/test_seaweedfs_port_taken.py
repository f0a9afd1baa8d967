"""Which ``weed mini`` failures mean a chosen port was taken by another socket, so that the first
start is tried again on fresh ports (tests/interop/test_seaweedfs_ports.py starts it for real).
The S3 gateway's line is weed's own, from a CI log; the other carries weed's port-check wording."""

from __future__ import annotations

from oncestream.seaweedfs_process import port_taken


def test_weeds_own_port_check_means_a_taken_port():
    assert port_taken("Port allocation failed: master port 35479 is in use")


def test_a_listener_that_cannot_bind_means_a_taken_port():
    # the cluster pass of a loaded CI run of ff04694f: the S3 gateway's port taken after weed's check
    assert port_taken("F1201 01:08:47.677883 s3.go:434 S3 API Server listener on 127.0.0.1:46517 error: "
                      "listen tcp 127.0.0.1:46517: bind: address already in use")


def test_other_failures_are_not_retried():
    assert not port_taken("F1201 01:08:47.6 volume.go:12 cannot create directory: permission denied")
