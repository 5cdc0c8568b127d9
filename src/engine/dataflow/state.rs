//! Typed keyed state for a [`KeyedProcessFunction`](super::KeyedProcessFunction): descriptors
//! (an id and a name, as Flink's `ValueStateDescriptor` and friends) and handles on the
//! current key's state. Values are serde_json-encoded into the byte-level states of
//! [`crate::engine::state`]; map keys too, so a map's entries come back ordered by their JSON
//! bytes.

use std::marker::PhantomData;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::engine::state::{ListState, MapState, OperatorState, StateError, ValueState};

/// The largest state id a descriptor may use; larger ones hold the operator's own timers and
/// watermark.
pub const MAX_STATE_ID: u8 = 239;

/// Why a typed state access failed. A user function returns it with `?`; the job then stops
/// naming the operator.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StateAccessError {
    /// The descriptor's id is reserved.
    #[error("state {name:?}: id {id} is reserved; give an id from 0 to {MAX_STATE_ID}")]
    ReservedId {
        /// The descriptor's name.
        name: &'static str,
        /// Its id.
        id: u8,
    },
    /// The value cannot be encoded as JSON.
    #[error("state {name:?}: cannot encode the value as JSON: {message}")]
    Encode {
        /// The descriptor's name.
        name: &'static str,
        /// serde_json's message.
        message: String,
    },
    /// The stored bytes are not a value of the descriptor's type (its type changed since the
    /// checkpoint, or two descriptors share an id).
    #[error("state {name:?}: the stored value is not a {type_name}: {message}; restore with the state's old type, or start fresh")]
    Decode {
        /// The descriptor's name.
        name: &'static str,
        /// The type it was read as.
        type_name: &'static str,
        /// serde_json's message.
        message: String,
    },
    /// The state store failed.
    #[error("state {name:?}: {source}")]
    Store {
        /// The descriptor's name.
        name: &'static str,
        /// The store's error.
        #[source]
        source: StateError,
    },
}

/// The JSON of `value`, for state `name`.
pub(crate) fn encode<T: Serialize>(
    name: &'static str,
    value: &T,
) -> Result<Vec<u8>, StateAccessError> {
    serde_json::to_vec(value).map_err(|e| StateAccessError::Encode {
        name,
        message: e.to_string(),
    })
}

/// The `T` in `bytes`, for state `name`.
pub(crate) fn decode<T: DeserializeOwned>(
    name: &'static str,
    bytes: &[u8],
) -> Result<T, StateAccessError> {
    serde_json::from_slice(bytes).map_err(|e| StateAccessError::Decode {
        name,
        type_name: std::any::type_name::<T>(),
        message: e.to_string(),
    })
}

fn checked(name: &'static str, id: u8) -> Result<u8, StateAccessError> {
    if id > MAX_STATE_ID {
        return Err(StateAccessError::ReservedId { name, id });
    }
    Ok(id)
}

fn store(name: &'static str) -> impl Fn(StateError) -> StateAccessError {
    move |source| StateAccessError::Store { name, source }
}

macro_rules! descriptor {
    ($(#[$doc:meta])* $name:ident<$($p:ident),+>) => {
        $(#[$doc])*
        pub struct $name<$($p),+> {
            id: u8,
            name: &'static str,
            _types: PhantomData<fn() -> ($($p,)+)>,
        }

        impl<$($p),+> $name<$($p),+> {
            /// The state with id `id` (0 to [`MAX_STATE_ID`], unique within the operator: it
            /// names the state in checkpoints) and a name for messages.
            pub const fn new(id: u8, name: &'static str) -> Self {
                Self { id, name, _types: PhantomData }
            }

            /// Its id.
            pub const fn id(&self) -> u8 {
                self.id
            }

            /// Its name.
            pub const fn name(&self) -> &'static str {
                self.name
            }
        }

        impl<$($p),+> Clone for $name<$($p),+> {
            fn clone(&self) -> Self {
                *self
            }
        }

        impl<$($p),+> Copy for $name<$($p),+> {}

        impl<$($p),+> std::fmt::Debug for $name<$($p),+> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}({}, {:?})", stringify!($name), self.id, self.name)
            }
        }
    };
}

descriptor!(
    /// One value of type `T` per key (Flink's `ValueStateDescriptor`).
    ValueStateDescriptor<T>
);
descriptor!(
    /// A map from `UK` to `UV` per key (Flink's `MapStateDescriptor`).
    MapStateDescriptor<UK, UV>
);
descriptor!(
    /// A list of `T` per key, stored as one value: for short lists (Flink's
    /// `ListStateDescriptor`).
    ListStateDescriptor<T>
);

/// The current key's value state (from [`Context::value_state`](super::Context::value_state)).
pub struct ValueStateHandle<'a, T> {
    pub(crate) state: &'a mut OperatorState,
    pub(crate) key: &'a [u8],
    pub(crate) desc: ValueStateDescriptor<T>,
}

impl<T: Serialize + DeserializeOwned> ValueStateHandle<'_, T> {
    fn raw(&self) -> Result<ValueState, StateAccessError> {
        Ok(ValueState::new(checked(self.desc.name, self.desc.id)?))
    }

    /// The value, `None` when unset.
    ///
    /// # Errors
    /// A reserved id, a stored value of another type, or a store failure.
    pub fn value(&self) -> Result<Option<T>, StateAccessError> {
        let name = self.desc.name;
        match self.raw()?.get(self.state, self.key).map_err(store(name))? {
            Some(bytes) => decode(name, &bytes).map(Some),
            None => Ok(None),
        }
    }

    /// Sets the value.
    ///
    /// # Errors
    /// A reserved id, or a value serde_json cannot encode.
    pub fn update(&mut self, value: &T) -> Result<(), StateAccessError> {
        let bytes = encode(self.desc.name, value)?;
        self.raw()?.set(self.state, self.key, &bytes);
        Ok(())
    }

    /// Unsets the value.
    ///
    /// # Errors
    /// A reserved id.
    pub fn clear(&mut self) -> Result<(), StateAccessError> {
        self.raw()?.clear(self.state, self.key);
        Ok(())
    }
}

/// The current key's map state (from [`Context::map_state`](super::Context::map_state)).
pub struct MapStateHandle<'a, UK, UV> {
    pub(crate) state: &'a mut OperatorState,
    pub(crate) key: &'a [u8],
    pub(crate) desc: MapStateDescriptor<UK, UV>,
}

impl<UK, UV> MapStateHandle<'_, UK, UV>
where
    UK: Serialize + DeserializeOwned,
    UV: Serialize + DeserializeOwned,
{
    fn raw(&self) -> Result<MapState, StateAccessError> {
        Ok(MapState::new(checked(self.desc.name, self.desc.id)?))
    }

    /// The value under `k`.
    ///
    /// # Errors
    /// A reserved id, a stored value of another type, or a store failure.
    pub fn get(&self, k: &UK) -> Result<Option<UV>, StateAccessError> {
        let name = self.desc.name;
        let mk = encode(name, k)?;
        match self
            .raw()?
            .get(self.state, self.key, &mk)
            .map_err(store(name))?
        {
            Some(bytes) => decode(name, &bytes).map(Some),
            None => Ok(None),
        }
    }

    /// Puts `v` under `k`.
    ///
    /// # Errors
    /// A reserved id, or a key or value serde_json cannot encode.
    pub fn put(&mut self, k: &UK, v: &UV) -> Result<(), StateAccessError> {
        let name = self.desc.name;
        let (mk, bytes) = (encode(name, k)?, encode(name, v)?);
        self.raw()?.insert(self.state, self.key, &mk, &bytes);
        Ok(())
    }

    /// Removes `k`.
    ///
    /// # Errors
    /// A reserved id, or a key serde_json cannot encode.
    pub fn remove(&mut self, k: &UK) -> Result<(), StateAccessError> {
        let mk = encode(self.desc.name, k)?;
        self.raw()?.remove(self.state, self.key, &mk);
        Ok(())
    }

    /// Every entry, ordered by the keys' JSON bytes.
    ///
    /// # Errors
    /// A reserved id, a stored entry of another type, or a store failure.
    pub fn entries(&self) -> Result<Vec<(UK, UV)>, StateAccessError> {
        let name = self.desc.name;
        let raw = self
            .raw()?
            .entries(self.state, self.key)
            .map_err(store(name))?;
        raw.iter()
            .map(|(k, v)| Ok((decode(name, k)?, decode(name, v)?)))
            .collect()
    }

    /// Removes every entry.
    ///
    /// # Errors
    /// A reserved id, or a store failure.
    pub fn clear(&mut self) -> Result<(), StateAccessError> {
        let name = self.desc.name;
        self.raw()?.clear(self.state, self.key).map_err(store(name))
    }
}

/// The current key's list state (from [`Context::list_state`](super::Context::list_state)).
pub struct ListStateHandle<'a, T> {
    pub(crate) state: &'a mut OperatorState,
    pub(crate) key: &'a [u8],
    pub(crate) desc: ListStateDescriptor<T>,
}

impl<T: Serialize + DeserializeOwned> ListStateHandle<'_, T> {
    fn raw(&self) -> Result<ListState, StateAccessError> {
        Ok(ListState::new(checked(self.desc.name, self.desc.id)?))
    }

    /// The list (empty when unset).
    ///
    /// # Errors
    /// A reserved id, a stored item of another type, or a store failure.
    pub fn get(&self) -> Result<Vec<T>, StateAccessError> {
        let name = self.desc.name;
        let items = self.raw()?.get(self.state, self.key).map_err(store(name))?;
        items.iter().map(|b| decode(name, b)).collect()
    }

    /// Appends `item`.
    ///
    /// # Errors
    /// A reserved id, an item serde_json cannot encode, or a store failure.
    pub fn add(&mut self, item: &T) -> Result<(), StateAccessError> {
        let name = self.desc.name;
        let bytes = encode(name, item)?;
        self.raw()?
            .push(self.state, self.key, &bytes)
            .map_err(store(name))
    }

    /// Replaces the list (empty: unsets it).
    ///
    /// # Errors
    /// A reserved id, or an item serde_json cannot encode.
    pub fn update(&mut self, items: &[T]) -> Result<(), StateAccessError> {
        let name = self.desc.name;
        let encoded = items
            .iter()
            .map(|i| encode(name, i))
            .collect::<Result<Vec<_>, _>>()?;
        self.raw()?.update(self.state, self.key, &encoded);
        Ok(())
    }

    /// Unsets the list.
    ///
    /// # Errors
    /// A reserved id.
    pub fn clear(&mut self) -> Result<(), StateAccessError> {
        self.raw()?.clear(self.state, self.key);
        Ok(())
    }
}
