//! What a store answers: the modes of memcached's storage commands ([`StoreMode`]), their
//! statuses ([`StoreStatus`]) and the errors of a write ([`StoreError`]) or of incr/decr
//! ([`DeltaError`]). Plain data, shared by every write path.

/// How a store treats an existing item (memcached's storage commands).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreMode {
    /// Store unconditionally.
    Set,
    /// Store only if the key holds nothing (a delete hold-off also blocks it).
    Add,
    /// Store only if the key holds a value.
    Replace,
    /// Add to the end of an existing value (flags and expiry unchanged).
    Append,
    /// Add to the start of an existing value (flags and expiry unchanged).
    Prepend,
    /// Store only if the key's CAS value is still this one (an item's CAS is its lease token
    /// while it has one, so this is also the meta protocol's lease-set).
    Cas(u64),
    /// mcrouter's `lease-set`: store if this token is the key's outstanding lease; otherwise
    /// (deleted since, token voided, reissued, or the key filled by someone else) refuse.
    Lease(u64),
}

/// What a store did, in memcached's words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreStatus {
    /// STORED
    Stored,
    /// NOT_STORED: the condition of add, replace, append or prepend failed.
    NotStored,
    /// EXISTS: the CAS value changed since the client read it.
    Exists,
    /// NOT_FOUND: cas on a key that holds nothing.
    NotFound,
}

/// Why a write could not be done.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The key is empty or longer than the item format allows.
    #[error("bad key length")]
    BadKey,
    /// The item does not fit in a segment.
    #[error("object too large for cache")]
    TooLarge,
    /// No segment is free and none could be evicted.
    #[error("out of memory storing object")]
    OutOfMemory,
}

/// Why incr/decr failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DeltaError {
    /// The stored value is not a decimal number.
    #[error("cannot increment or decrement non-numeric value")]
    NonNumeric,
    /// The write itself failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}
