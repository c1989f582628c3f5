"""A writer in a loop, reduced to its lock: used by bench/lock_wait.py and the lock tests.

    python bench/lock_holder.py LOCK_PATH HOLD_SECONDS GAP_SECONDS

Takes the lock with a plain blocking flock (independent of gitstate's code), holds it for
HOLD_SECONDS, releases it and takes it again after GAP_SECONDS of busy work, forever. Prints
"held" once it holds the lock the first time.
"""

import fcntl
import os
import sys
import time


def main() -> None:
    path, hold, gap = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
    first = True
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        if first:
            print("held", flush=True)
            first = False
        time.sleep(hold)
        os.close(fd)
        end = time.perf_counter() + gap
        while time.perf_counter() < end:  # busy, as a writer preparing its next write is
            pass


if __name__ == "__main__":
    main()
