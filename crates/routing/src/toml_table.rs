//! One TOML table read as a type, its errors naming the key they are about: what the pool,
//! route and `[router]` tables of `config` and `routes` are read with.

/// One table read as `T`; the error names the key it is about (`item_size_max: invalid
/// value: integer \`-1\`, expected u64`), as the table is read on its own.
pub(crate) fn table_as<T: serde::de::DeserializeOwned>(value: toml::Value) -> Result<T, String> {
    let text = toml::to_string(&value).unwrap_or_default();
    toml::from_str::<T>(&text).map_err(|e| {
        let message = e.message().trim_end().to_string();
        let key = e.span().and_then(|span| {
            let start = text.get(..span.start)?.rfind('\n').map_or(0, |i| i + 1);
            let (key, _) = text.get(start..)?.split_once(" = ")?;
            Some(key.trim().to_string())
        });
        match key {
            Some(key) if !message.contains(&key) => format!("{key}: {message}"),
            _ => message,
        }
    })
}
