//! Typed keyed state for a [`KeyedProcessFunction`](super::KeyedProcessFunction): descriptors
//! (an id and a name, as Flink's `ValueStateDescriptor` and friends) and handles on the
//! current key's state. Values are serde_json-encoded into the byte-level states of
//! [`crate::engine::state`]; map keys too, so a map's entries come back ordered by their JSON
//! bytes.

use std::marker::PhantomData;

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::ttl::{judge, stamped, Judged, Shape, StateTtl, TtlCleanup, TtlClock, CLEANUP_STEP};
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
            ttl: Option<StateTtl>,
            _types: PhantomData<fn() -> ($($p,)+)>,
        }

        impl<$($p),+> $name<$($p),+> {
            /// The state with id `id` (0 to [`MAX_STATE_ID`], unique within the operator: it
            /// names the state in checkpoints) and a name for messages.
            pub const fn new(id: u8, name: &'static str) -> Self {
                Self { id, name, ttl: None, _types: PhantomData }
            }

            /// The same state, its values living `ttl` ([`StateTtl`]): expired values are
            /// never read back, and are deleted as the state is used. Giving a TTL to a state
            /// restored from a checkpoint, or taking it away, keeps its values readable.
            #[must_use]
            pub const fn with_ttl(mut self, ttl: StateTtl) -> Self {
                self.ttl = Some(ttl);
                self
            }

            /// Its time-to-live, if it has one.
            pub const fn ttl(&self) -> Option<StateTtl> {
                self.ttl
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
                write!(f, "{}({}, {:?}", stringify!($name), self.id, self.name)?;
                match &self.ttl {
                    Some(ttl) => write!(f, ", {ttl:?})"),
                    None => write!(f, ")"),
                }
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

/// A live value a read found, and the bytes to store instead when the read renews it.
type Read<V> = (V, Option<Vec<u8>>);

/// What a handle reaches: the current key's state, the clocks a TTL reads, and the subtask's
/// TTL cleanup.
pub(crate) struct Access<'a> {
    pub(crate) state: &'a mut OperatorState,
    pub(crate) key: &'a [u8],
    pub(crate) clock: TtlClock,
    pub(crate) cleanup: &'a mut TtlCleanup,
}

impl Access<'_> {
    /// What to store for `json` under `ttl`: stamped now, or as it is.
    fn stored(&self, ttl: Option<&StateTtl>, json: &[u8]) -> Vec<u8> {
        match ttl {
            Some(ttl) => stamped(ttl.stamp(&self.clock), json),
            None => json.to_vec(),
        }
    }

    /// What a user's read of `stored` finds: `None` when expired (the caller deletes it), else
    /// the value and, when the read renews it (or it was stored before the state had a TTL
    /// and the TTL renews on reads), the bytes to store instead.
    fn read<V: DeserializeOwned>(
        &self,
        name: &'static str,
        ttl: Option<&StateTtl>,
        stored: &[u8],
    ) -> Result<Option<Read<V>>, StateAccessError> {
        let judged =
            judge(ttl, stored, &self.clock, true).ok_or_else(|| StateAccessError::Decode {
                name,
                type_name: "stamped value",
                message: "the time-to-live stamp is cut short".into(),
            })?;
        match judged {
            Judged::Expired => Ok(None),
            Judged::Live { json, restamp } => {
                let again = restamp.then(|| self.stored(ttl, json));
                Ok(Some((decode(name, json)?, again)))
            }
        }
    }

    /// A cleanup step on state `id` when it has a TTL.
    fn clean(
        &mut self,
        name: &'static str,
        id: u8,
        ttl: Option<StateTtl>,
        shape: Shape,
    ) -> Result<(), StateAccessError> {
        if let Some(ttl) = ttl {
            self.cleanup.track(id, ttl, shape);
            self.cleanup
                .step(self.state, id, &self.clock, CLEANUP_STEP)
                .map_err(store(name))?;
        }
        Ok(())
    }
}

/// The current key's value state (from [`Context::value_state`](super::Context::value_state)).
pub struct ValueStateHandle<'a, T> {
    pub(crate) access: Access<'a>,
    pub(crate) desc: ValueStateDescriptor<T>,
}

impl<T: Serialize + DeserializeOwned> ValueStateHandle<'_, T> {
    fn raw(&self) -> Result<ValueState, StateAccessError> {
        Ok(ValueState::new(checked(self.desc.name, self.desc.id)?))
    }

    fn clean(&mut self) -> Result<(), StateAccessError> {
        let d = self.desc;
        self.access.clean(d.name, d.id, d.ttl, Shape::Single)
    }

    /// The value, `None` when unset (or expired: [`ValueStateDescriptor::with_ttl`]). Under
    /// [`StateTtl::refreshed_on_read`] the read renews its time.
    ///
    /// # Errors
    /// A reserved id, a stored value of another type, or a store failure.
    pub fn value(&mut self) -> Result<Option<T>, StateAccessError> {
        let (name, ttl, raw) = (self.desc.name, self.desc.ttl, self.raw()?);
        let a = &mut self.access;
        let stored = raw.get(a.state, a.key).map_err(store(name))?;
        let found = match stored.map(|b| a.read(name, ttl.as_ref(), &b)).transpose()? {
            None => None,
            Some(None) => {
                raw.clear(a.state, a.key);
                None
            }
            Some(Some((value, again))) => {
                if let Some(again) = again {
                    raw.set(a.state, a.key, &again);
                }
                Some(value)
            }
        };
        self.clean()?;
        Ok(found)
    }

    /// Sets the value.
    ///
    /// # Errors
    /// A reserved id, a value serde_json cannot encode, or a store failure (the TTL cleanup
    /// reads the store).
    pub fn update(&mut self, value: &T) -> Result<(), StateAccessError> {
        let raw = self.raw()?;
        let json = encode(self.desc.name, value)?;
        let bytes = self.access.stored(self.desc.ttl.as_ref(), &json);
        raw.set(self.access.state, self.access.key, &bytes);
        self.clean()
    }

    /// Unsets the value.
    ///
    /// # Errors
    /// A reserved id, or a store failure (the TTL cleanup reads the store).
    pub fn clear(&mut self) -> Result<(), StateAccessError> {
        self.raw()?.clear(self.access.state, self.access.key);
        self.clean()
    }
}

/// The current key's map state (from [`Context::map_state`](super::Context::map_state)). With a
/// TTL, each entry has its own time.
pub struct MapStateHandle<'a, UK, UV> {
    pub(crate) access: Access<'a>,
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

    fn clean(&mut self) -> Result<(), StateAccessError> {
        let d = self.desc;
        self.access.clean(d.name, d.id, d.ttl, Shape::Single)
    }

    /// The live value of entry `mk` (its stored bytes given), renewed when the TTL says so;
    /// an expired one is removed.
    fn live(
        &mut self,
        raw: MapState,
        mk: &[u8],
        bytes: &[u8],
    ) -> Result<Option<UV>, StateAccessError> {
        let (name, ttl) = (self.desc.name, self.desc.ttl);
        let a = &mut self.access;
        match a.read(name, ttl.as_ref(), bytes)? {
            None => {
                raw.remove(a.state, a.key, mk);
                Ok(None)
            }
            Some((value, again)) => {
                if let Some(again) = again {
                    raw.insert(a.state, a.key, mk, &again);
                }
                Ok(Some(value))
            }
        }
    }

    /// The value under `k` (`None`: absent or expired).
    ///
    /// # Errors
    /// A reserved id, a stored value of another type, or a store failure.
    pub fn get(&mut self, k: &UK) -> Result<Option<UV>, StateAccessError> {
        let (name, raw) = (self.desc.name, self.raw()?);
        let mk = encode(name, k)?;
        let stored = raw
            .get(self.access.state, self.access.key, &mk)
            .map_err(store(name))?;
        let found = match stored {
            Some(bytes) => self.live(raw, &mk, &bytes)?,
            None => None,
        };
        self.clean()?;
        Ok(found)
    }

    /// Puts `v` under `k`.
    ///
    /// # Errors
    /// A reserved id, a key or value serde_json cannot encode, or a store failure (the TTL
    /// cleanup reads the store).
    pub fn put(&mut self, k: &UK, v: &UV) -> Result<(), StateAccessError> {
        let (name, raw) = (self.desc.name, self.raw()?);
        let (mk, json) = (encode(name, k)?, encode(name, v)?);
        let bytes = self.access.stored(self.desc.ttl.as_ref(), &json);
        raw.insert(self.access.state, self.access.key, &mk, &bytes);
        self.clean()
    }

    /// Removes `k`.
    ///
    /// # Errors
    /// A reserved id, a key serde_json cannot encode, or a store failure (the TTL cleanup
    /// reads the store).
    pub fn remove(&mut self, k: &UK) -> Result<(), StateAccessError> {
        let raw = self.raw()?;
        let mk = encode(self.desc.name, k)?;
        raw.remove(self.access.state, self.access.key, &mk);
        self.clean()
    }

    /// Every live entry, ordered by the keys' JSON bytes.
    ///
    /// # Errors
    /// A reserved id, a stored entry of another type, or a store failure.
    pub fn entries(&mut self) -> Result<Vec<(UK, UV)>, StateAccessError> {
        let (name, raw) = (self.desc.name, self.raw()?);
        let stored = raw
            .entries(self.access.state, self.access.key)
            .map_err(store(name))?;
        let mut out = Vec::with_capacity(stored.len());
        for (mk, bytes) in stored {
            if let Some(v) = self.live(raw, &mk, &bytes)? {
                out.push((decode(name, &mk)?, v));
            }
        }
        self.clean()?;
        Ok(out)
    }

    /// Removes every entry.
    ///
    /// # Errors
    /// A reserved id, or a store failure.
    pub fn clear(&mut self) -> Result<(), StateAccessError> {
        let name = self.desc.name;
        let raw = self.raw()?;
        raw.clear(self.access.state, self.access.key)
            .map_err(store(name))?;
        self.clean()
    }
}

/// The current key's list state (from [`Context::list_state`](super::Context::list_state)). With
/// a TTL, each item has its own time.
pub struct ListStateHandle<'a, T> {
    pub(crate) access: Access<'a>,
    pub(crate) desc: ListStateDescriptor<T>,
}

impl<T: Serialize + DeserializeOwned> ListStateHandle<'_, T> {
    fn raw(&self) -> Result<ListState, StateAccessError> {
        Ok(ListState::new(checked(self.desc.name, self.desc.id)?))
    }

    fn clean(&mut self) -> Result<(), StateAccessError> {
        let d = self.desc;
        self.access.clean(d.name, d.id, d.ttl, Shape::List)
    }

    /// The list's live items (empty when unset).
    ///
    /// # Errors
    /// A reserved id, a stored item of another type, or a store failure.
    pub fn get(&mut self) -> Result<Vec<T>, StateAccessError> {
        let (name, ttl, raw) = (self.desc.name, self.desc.ttl, self.raw()?);
        let a = &mut self.access;
        let items = raw.get(a.state, a.key).map_err(store(name))?;
        let mut out = Vec::with_capacity(items.len());
        let mut kept = Vec::with_capacity(items.len());
        let mut changed = false;
        for item in &items {
            match a.read(name, ttl.as_ref(), item)? {
                None => changed = true,
                Some((value, again)) => {
                    out.push(value);
                    changed |= again.is_some();
                    kept.push(again.unwrap_or_else(|| item.clone()));
                }
            }
        }
        if changed {
            raw.update(a.state, a.key, &kept);
        }
        self.clean()?;
        Ok(out)
    }

    /// Appends `item`.
    ///
    /// # Errors
    /// A reserved id, an item serde_json cannot encode, or a store failure.
    pub fn add(&mut self, item: &T) -> Result<(), StateAccessError> {
        let (name, raw) = (self.desc.name, self.raw()?);
        let json = encode(name, item)?;
        let bytes = self.access.stored(self.desc.ttl.as_ref(), &json);
        raw.push(self.access.state, self.access.key, &bytes)
            .map_err(store(name))?;
        self.clean()
    }

    /// Replaces the list (empty: unsets it).
    ///
    /// # Errors
    /// A reserved id, an item serde_json cannot encode, or a store failure (the TTL cleanup
    /// reads the store).
    pub fn update(&mut self, items: &[T]) -> Result<(), StateAccessError> {
        let (name, ttl, raw) = (self.desc.name, self.desc.ttl, self.raw()?);
        let encoded = items
            .iter()
            .map(|i| Ok(self.access.stored(ttl.as_ref(), &encode(name, i)?)))
            .collect::<Result<Vec<_>, StateAccessError>>()?;
        raw.update(self.access.state, self.access.key, &encoded);
        self.clean()
    }

    /// Unsets the list.
    ///
    /// # Errors
    /// A reserved id, or a store failure (the TTL cleanup reads the store).
    pub fn clear(&mut self) -> Result<(), StateAccessError> {
        self.raw()?.clear(self.access.state, self.access.key);
        self.clean()
    }
}
