package memfleet.interop;

import java.util.Arrays;

/** A raw value with its memcached item flags, as the raw transcoders store and read it. */
record Flagged(byte[] data, int flags) {
    @Override
    public boolean equals(Object o) {
        return o instanceof Flagged f && f.flags == flags && Arrays.equals(f.data, data);
    }

    @Override
    public int hashCode() {
        return Arrays.hashCode(data) * 31 + flags;
    }

    @Override
    public String toString() {
        return "Flagged(" + Suite.show(data) + ", flags=" + Integer.toUnsignedString(flags) + ")";
    }
}
