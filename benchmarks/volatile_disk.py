"""A disk with a volatile write cache, as a FUSE file: the power-loss half of
benchmarks/durable_powerloss.py (run as root; needs FUSE and fusepy: `apt-get install python3-fusepy`).

    python3 benchmarks/volatile_disk.py MOUNTPOINT IMAGE SIZE_MB

MOUNTPOINT/disk.img is a file of SIZE_MB whose writes land in memory; an fsync of it (what the loop
driver does for every flush or FUA write that the file system on top issues) copies them to IMAGE
and fsyncs IMAGE. Writing `cut` to MOUNTPOINT/ctl is the power cut: from then on nothing reaches
IMAGE any more, so IMAGE holds exactly what the disk had made durable at that instant, and every
write the file system on top had not flushed is lost. Reads see the volatile state, so the file
system keeps running (in a world that is about to vanish) until it is unmounted.
"""
import errno
import os
import stat
import sys
import threading

try:
    import fuse
except ImportError:  # Debian's python3-fusepy names the module fusepy
    import fusepy as fuse

BLOCK = 4096


class VolatileDisk(fuse.Operations):
    def __init__(self, image: str, size: int):
        self.fd = os.open(image, os.O_RDWR | os.O_CREAT, 0o600)
        os.ftruncate(self.fd, size)
        self.size = size
        self.cache: dict[int, bytearray] = {}
        self.lock = threading.Lock()
        self.cut = False
        self.flushes = 0

    def getattr(self, path, fh=None):
        if path == "/":
            return {"st_mode": stat.S_IFDIR | 0o700, "st_nlink": 2}
        if path == "/disk.img":
            return {"st_mode": stat.S_IFREG | 0o600, "st_nlink": 1, "st_size": self.size}
        if path == "/ctl":
            return {"st_mode": stat.S_IFREG | 0o600, "st_nlink": 1, "st_size": 0}
        raise fuse.FuseOSError(errno.ENOENT)

    def readdir(self, path, fh):
        return [".", "..", "disk.img", "ctl"]

    def open(self, path, flags):
        return 0

    def truncate(self, path, length, fh=None):
        return 0

    def _block(self, b: int) -> bytearray:
        found = self.cache.get(b)
        return found if found is not None else bytearray(os.pread(self.fd, BLOCK, b * BLOCK).ljust(BLOCK, b"\0"))

    def read(self, path, size, offset, fh):
        if path != "/disk.img":
            return b"cut\n" if self.cut else b""
        with self.lock:
            out = bytearray()
            while size > 0 and offset < self.size:
                b, o = divmod(offset, BLOCK)
                chunk = self._block(b)[o:o + min(size, BLOCK - o)]
                out += chunk
                offset += len(chunk)
                size -= len(chunk)
            return bytes(out)

    def write(self, path, data, offset, fh):
        if path == "/ctl":
            if data.strip() == b"cut":
                with self.lock:
                    self.cut = True
            return len(data)
        with self.lock:
            done = 0
            while done < len(data):
                b, o = divmod(offset + done, BLOCK)
                block = self._block(b)
                n = min(len(data) - done, BLOCK - o)
                block[o:o + n] = data[done:done + n]
                self.cache[b] = block
                done += n
            return done

    def fsync(self, path, datasync, fh):
        with self.lock:
            self.flushes += 1
            if self.cut:
                return 0  # the power is off: nothing reaches the platter any more
            for b, block in sorted(self.cache.items()):
                os.pwrite(self.fd, bytes(block), b * BLOCK)
            os.fsync(self.fd)
            self.cache.clear()
        return 0

    def flush(self, path, fh):
        return 0

    def release(self, path, fh):
        return 0


def main() -> int:
    mountpoint, image, size_mb = sys.argv[1], sys.argv[2], int(sys.argv[3])
    fuse.FUSE(VolatileDisk(image, size_mb << 20), mountpoint, foreground=True, nothreads=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
