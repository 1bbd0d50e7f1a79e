//! Per-runtime state owned by the layers above the runtime, which the runtime holds without
//! knowing its type.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// One value per type, made on first use.
#[derive(Default)]
pub(crate) struct Extensions(Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>);

impl Extensions {
    pub(crate) fn get_or_default<T: Default + Send + Sync + 'static>(&self) -> Arc<T> {
        let mut map = crate::sync::lock(&self.0);
        let entry = map
            .entry(TypeId::of::<T>())
            .or_insert_with(|| Arc::new(T::default()));
        match Arc::clone(entry).downcast::<T>() {
            Ok(value) => value,
            // The map is keyed by the value's own TypeId, so the downcast cannot fail; make a
            // fresh value rather than panic if that invariant were ever broken.
            Err(_) => {
                let value = Arc::new(T::default());
                *entry = value.clone();
                value
            }
        }
    }
}
