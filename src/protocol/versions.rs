//! API version negotiation.
//!
//! On connect the client sends ApiVersions and keeps, per API key, the highest version both
//! sides support, plus the broker's finalized features (`transaction.version` among them, which
//! decides whether KIP-890's transaction protocol may be used).

use kafka_protocol::messages::{ApiKey, ApiVersionsResponse};
use kafka_protocol::protocol::Request;
use std::collections::HashMap;

/// What one broker supports, learnt from its ApiVersions response.
#[derive(Debug, Clone, Default)]
pub struct ApiVersions {
    ranges: HashMap<i16, (i16, i16)>,
    finalized: HashMap<String, i16>,
    /// The epoch of the finalized features (-1: not reported): a broker that has just
    /// restarted answers with an older epoch (or none) until it has caught up with the
    /// cluster's metadata, so the highest epoch seen is the cluster's truth.
    finalized_epoch: i64,
}

impl ApiVersions {
    /// Builds the table from an ApiVersions response.
    pub fn from_response(resp: &ApiVersionsResponse) -> Self {
        let ranges = resp
            .api_keys
            .iter()
            .map(|k| (k.api_key, (k.min_version, k.max_version)))
            .collect();
        let finalized = resp
            .finalized_features
            .iter()
            .map(|f| (f.name.to_string(), f.max_version_level))
            .collect();
        ApiVersions {
            ranges,
            finalized,
            finalized_epoch: resp.finalized_features_epoch,
        }
    }

    /// The highest version of `R` that both we (the kafka-protocol crate) and the broker support,
    /// capped at `cap` if given. `None` when the ranges do not overlap.
    pub fn version_for<R: Request>(&self, cap: Option<i16>) -> Option<i16> {
        self.version_for_key(R::KEY, cap)
    }

    /// As [`Self::version_for`], by API key.
    pub fn version_for_key(&self, key: i16, cap: Option<i16>) -> Option<i16> {
        let ours = ApiKey::try_from(key).ok()?.valid_versions();
        let (bmin, bmax) = *self.ranges.get(&key)?;
        let mut max = ours.max.min(bmax);
        if let Some(c) = cap {
            max = max.min(c);
        }
        let min = ours.min.max(bmin);
        (min <= max).then_some(max)
    }

    /// The broker's finalized level of a feature such as `transaction.version` (0 if absent).
    pub fn finalized_feature(&self, name: &str) -> i16 {
        self.finalized.get(name).copied().unwrap_or(0)
    }

    /// The epoch of [`Self::finalized_feature`]'s levels (-1 when the broker reports none).
    pub fn finalized_epoch(&self) -> i64 {
        self.finalized_epoch
    }

    /// The first of the APIs every Kafka broker this client supports (2.8 and later) offers —
    /// Metadata, Produce, Fetch, ListOffsets, FindCoordinator — that this answer shares no
    /// version of. Any such API means the answer is nonsense (damaged on the way) or the
    /// broker far too old: the connection is no use either way.
    pub fn missing_core(&self) -> Option<ApiKey> {
        [
            ApiKey::Metadata,
            ApiKey::Produce,
            ApiKey::Fetch,
            ApiKey::ListOffsets,
            ApiKey::FindCoordinator,
        ]
        .into_iter()
        .find(|k| self.version_for_key(*k as i16, None).is_none())
    }

    /// The broker's advertised range for an API key.
    pub fn broker_range(&self, key: i16) -> Option<(i16, i16)> {
        self.ranges.get(&key).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::api_versions_response::{ApiVersion, FinalizedFeatureKey};
    use kafka_protocol::messages::{FetchRequest, ProduceRequest};
    use kafka_protocol::protocol::StrBytes;

    #[test]
    fn picks_highest_common_version_and_reads_features() {
        let resp = ApiVersionsResponse::default()
            .with_api_keys(vec![
                ApiVersion::default()
                    .with_api_key(0)
                    .with_min_version(3)
                    .with_max_version(99),
                ApiVersion::default()
                    .with_api_key(1)
                    .with_min_version(0)
                    .with_max_version(2),
            ])
            .with_finalized_features(vec![FinalizedFeatureKey::default()
                .with_name(StrBytes::from_static_str("transaction.version"))
                .with_max_version_level(2)
                .with_min_version_level(2)]);
        let v = ApiVersions::from_response(&resp);
        let produce_max = ApiKey::Produce.valid_versions().max;
        assert_eq!(v.version_for::<ProduceRequest>(None), Some(produce_max));
        assert_eq!(v.version_for::<ProduceRequest>(Some(9)), Some(9));
        // Fetch: broker max 2 is below the crate's minimum (4): no common version.
        assert_eq!(v.version_for::<FetchRequest>(None), None);
        assert_eq!(v.finalized_feature("transaction.version"), 2);
        assert_eq!(v.finalized_feature("group.version"), 0);
    }

    #[test]
    fn an_answer_without_a_core_api_is_nonsense() {
        let all = |max_fetch: i16| {
            let keys = [
                (ApiKey::Metadata, 12),
                (ApiKey::Produce, 12),
                (ApiKey::Fetch, max_fetch),
                (ApiKey::ListOffsets, 9),
                (ApiKey::FindCoordinator, 6),
            ];
            ApiVersions::from_response(
                &ApiVersionsResponse::default().with_api_keys(
                    keys.iter()
                        .map(|(k, max)| {
                            ApiVersion::default()
                                .with_api_key(*k as i16)
                                .with_min_version(0)
                                .with_max_version(*max)
                        })
                        .collect(),
                ),
            )
        };
        assert_eq!(all(17).missing_core(), None);
        // A bit flipped in Fetch's max version (17 -> 1): below the crate's minimum.
        assert_eq!(all(1).missing_core(), Some(ApiKey::Fetch));
        assert_eq!(
            ApiVersions::default().missing_core(),
            Some(ApiKey::Metadata)
        );
    }
}
