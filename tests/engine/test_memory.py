"""How much memory a kernel may still use (engine/memory.py), read from cgroup files laid
out as cgroup v2 and v1 mount them. The refusal itself is tested with real limits:
tests/engine/test_memory_limit.py (a memory cgroup), tests/test_pause_memory.py
(RLIMIT_DATA, through a server's pause)."""

from __future__ import annotations

from jupyter_pause.engine import memory

MIB = 1 << 20


def write(folder, **files):
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name.replace("_", ".", 1)).write_text(text)


def test_cgroup_v2_counts_clean_page_cache_as_free_and_parents_bind_too(tmp_path):
    (tmp_path / "cgroup").write_text("0::/kubepods/pod1/box\n")
    stat = f"anon {600 * MIB}\nfile {300 * MIB}\nshmem {50 * MIB}\nfile_dirty {10 * MIB}\n"
    write(
        tmp_path / "fs" / "kubepods" / "pod1" / "box",
        memory_max=str(1024 * MIB),
        memory_current=str(900 * MIB),
        memory_stat=stat + f"file_writeback {0}\n",
    )
    write(tmp_path / "fs" / "kubepods" / "pod1", memory_max="max", memory_current=str(MIB))
    write(
        tmp_path / "fs" / "kubepods",
        memory_max=str(2048 * MIB),
        memory_current=str(2000 * MIB),
    )
    found = memory.cgroups(tmp_path / "cgroup", tmp_path / "fs")
    assert [h.free // MIB for h in found] == [1024 - 900 + 300 - 50 - 10, 48]
    assert "kubepods/pod1/box (memory.max 1024 MiB)" in found[0].limit


def test_cgroup_v1_reads_the_memory_controller(tmp_path):
    (tmp_path / "cgroup").write_text("5:cpu,cpuacct:/x\n4:memory:/docker/abc\n0::/\n")
    write(
        tmp_path / "fs" / "memory" / "docker" / "abc",
        memory_limit_in_bytes=str(512 * MIB),
        memory_usage_in_bytes=str(500 * MIB),
        memory_stat=f"cache {MIB}\ntotal_cache {100 * MIB}\ntotal_dirty {20 * MIB}\n",
    )
    write(tmp_path / "fs" / "memory" / "docker", memory_limit_in_bytes=str(2**63 - 4096))
    found = memory.cgroups(tmp_path / "cgroup", tmp_path / "fs")
    assert [h.free // MIB for h in found] == [512 - 500 + 100 - 20]
