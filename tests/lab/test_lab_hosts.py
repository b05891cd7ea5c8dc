"""The three-host lab end to end: systemd hosts with their own names and addresses, reachable by
Ansible, converged by site.yml; `make lab-up` reuses it and a second converge changes nothing."""

from __future__ import annotations

import time

import pytest
from labhosts import Lab, changed_nothing, run

# The first test also waits for the session fixture: image build, vagrant up and converge.
pytestmark = [pytest.mark.lab, pytest.mark.timeout(1200)]


def test_the_lab_has_one_machine_per_lab_host_of_the_inventory(lab: Lab) -> None:
    # a, b and c always; lab-only machines (172.30.0.20 and up) join them.
    assert {host: lab.hosts[host] for host in "abc"} == {
        "a": "172.30.0.10",
        "b": "172.30.0.11",
        "c": "172.30.0.12",
    }
    assert len(lab.containers()) == len(lab.hosts)


def test_each_host_runs_systemd_as_pid_1_with_no_failed_unit(lab: Lab) -> None:
    for host in lab.hosts:
        assert lab.ssh(host, "ps -o comm= -p 1").stdout.strip() == "systemd", host
        state = lab.ssh(host, "systemctl is-system-running", check=False).stdout.strip()
        failed = lab.ssh(host, "systemctl --failed --no-legend --plain").stdout.strip()
        assert (state, failed) == ("running", ""), host


def test_each_host_has_its_own_hostname_and_address(lab: Lab) -> None:
    for host, address in lab.hosts.items():
        assert lab.ssh(host, "hostname").stdout.strip() == host
        addresses = lab.ssh(host, "ip -4 -o addr show scope global").stdout
        assert f" {address}/24 " in addresses, (host, addresses)
        for other, other_address in lab.hosts.items():
            if other != host:
                assert f" {other_address}/" not in addresses


def test_hosts_reach_each_other_on_the_lab_network(lab: Lab) -> None:
    for host in lab.hosts:
        for other, address in lab.hosts.items():
            if other != host:
                probe = f"timeout 5 bash -c 'exec 3<>/dev/tcp/{address}/22' && echo open"
                assert lab.ssh(host, probe).stdout.strip() == "open", (host, other)


def test_ansible_reaches_every_host(lab: Lab) -> None:
    out = run(
        ["ansible", "all", "-i", "inventory", "-m", "ansible.builtin.ping"], timeout=120
    ).stdout
    for host in lab.hosts:
        assert f"{host} | SUCCESS" in out, out


def test_the_common_role_converged(lab: Lab) -> None:
    # The service accounts come from the service roles (test_lab_privileges).
    for host in lab.hosts:
        assert lab.ssh(host, "cat /etc/timezone").stdout.strip() == "Etc/UTC"
        journald = lab.ssh(host, "cat /etc/systemd/journald.conf.d/crawlfleet.conf").stdout
        assert "SystemMaxUse=500M" in journald
        # A container cannot set the clock: timesyncd is enabled, its condition keeps it stopped.
        assert lab.ssh(host, "systemctl is-enabled systemd-timesyncd").stdout.strip() == "enabled"


def test_make_lab_up_reuses_the_lab_and_a_second_converge_changes_nothing(lab: Lab) -> None:
    before = lab.containers()
    start = time.monotonic()
    proc = run(["make", "lab-up"], timeout=600)
    lab.timings["lab_up_reuse_and_rerun_s"] = time.monotonic() - start
    assert "already up" in proc.stdout and "reusing it" in proc.stdout, proc.stdout[-3000:]
    assert lab.containers() == before
    # On a running lab, lab-up runs exactly the command users type.
    assert "lab: ansible-playbook site.yml -i inventory" in proc.stdout
    assert set(changed_nothing(proc, lab.hosts)) == set(lab.hosts), proc.stdout[-3000:]
    status = run(["scripts/lab.sh", "status"], timeout=120).stdout
    for host, address in lab.hosts.items():
        assert any(
            line.split()[:2] == [host, address] and " running " in line
            for line in status.splitlines()
        ), status
