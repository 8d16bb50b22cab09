# Pulls a node's cable the moment a checkpoint save begins
# (t/multinode/resume.sh): polls DIR every millisecond for BASE.tmp.XXXXXX
# (the file phx_checkpoint_save writes before its rename) or for a new
# BASE (another file than the one there at the start), then runs "ip -n SWITCH link set PORT down". Prints "cut during
# the save" when the temporary file still existed after the cable was out
# (the rename came later), "cut after the save" otherwise, or "no save"
# after TIMEOUT seconds. With SECONDS > 0 the cable goes back in after
# that long.
# Usage: python3 cut_at_save.py DIR BASE SWITCH PORT SECONDS TIMEOUT
import os
import subprocess
import sys
import time

d, base, sw, port = sys.argv[1:5]
secs, limit = float(sys.argv[5]), time.time() + float(sys.argv[6])
pre = base + ".tmp."


def ident():
    try:
        st = os.stat(os.path.join(d, base))
        return (st.st_ino, st.st_mtime_ns)
    except FileNotFoundError:
        return None


first = ident()
while time.time() < limit:
    tmp = [n for n in os.listdir(d) if n.startswith(pre)]
    if tmp or ident() != first:
        subprocess.run(["ip", "-n", sw, "link", "set", port, "down"], check=True)
        during = any(os.path.exists(os.path.join(d, n)) for n in tmp)
        print("cut during the save" if during else "cut after the save", flush=True)
        if secs > 0:
            time.sleep(secs)
            subprocess.run(["ip", "-n", sw, "link", "set", port, "up"], check=True)
        sys.exit(0)
    time.sleep(0.001)
print("no save", flush=True)
