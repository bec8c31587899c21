"""Test job: prints the CPUs it may run on (Cpus_allowed_list from /proc) and MSRUN_CPU_LIST."""
import os

allowed = [l.split(":", 1)[1].strip() for l in open("/proc/self/status")
           if l.startswith("Cpus_allowed_list:")][0]
role = "sched" if os.environ.get("MS_ROLE") == "MS_SCHED" else os.environ.get("RANK_ID")
print(f"cpus {role} allowed={allowed} msrun={os.environ.get('MSRUN_CPU_LIST', '-')}", flush=True)
