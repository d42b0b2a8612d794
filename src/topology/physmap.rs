//! Physical address -> NUMA node, from the memory blocks each node owns.
//!
//! `/sys/devices/system/node/nodeN/memoryM` names the blocks of node N; block M spans
//! `[M * block_size, (M + 1) * block_size)` with `block_size` from
//! `/sys/devices/system/memory/block_size_bytes` (hex).

use super::NodeId;

/// Sorted, merged physical ranges with their node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PhysMap {
    /// (start, end exclusive, node), sorted by start, non-overlapping.
    ranges: Vec<(u64, u64, NodeId)>,
}

impl PhysMap {
    /// Builds the map from each node's block numbers.
    pub fn from_blocks(block_size: u64, blocks: impl IntoIterator<Item = (NodeId, u64)>) -> Self {
        let mut ranges: Vec<(u64, u64, NodeId)> = blocks
            .into_iter()
            .filter_map(|(node, block)| {
                let start = block.checked_mul(block_size)?;
                Some((start, start.checked_add(block_size)?, node))
            })
            .collect();
        ranges.sort_unstable();
        let mut merged: Vec<(u64, u64, NodeId)> = Vec::with_capacity(ranges.len());
        for r in ranges {
            match merged.last_mut() {
                Some(last) if last.2 == r.2 && last.1 == r.0 => last.1 = r.1,
                _ => merged.push(r),
            }
        }
        PhysMap { ranges: merged }
    }

    pub fn node_of(&self, paddr: u64) -> Option<NodeId> {
        let i = self.ranges.partition_point(|r| r.0 <= paddr);
        let (start, end, node) = *self.ranges.get(i.checked_sub(1)?)?;
        (start..end).contains(&paddr).then_some(node)
    }

    /// The merged ranges, for status output.
    pub fn ranges(&self) -> &[(u64, u64, NodeId)] {
        &self.ranges
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_addresses_to_nodes_and_merges_adjacent_blocks() {
        let map = PhysMap::from_blocks(0x1000, [(0, 0), (0, 1), (2, 2), (1, 4)]);
        assert_eq!(
            map.ranges(),
            &[(0, 0x2000, 0), (0x2000, 0x3000, 2), (0x4000, 0x5000, 1)]
        );
        assert_eq!(map.node_of(0), Some(0));
        assert_eq!(map.node_of(0x1fff), Some(0));
        assert_eq!(map.node_of(0x2000), Some(2));
        assert_eq!(map.node_of(0x3000), None, "hole between blocks");
        assert_eq!(map.node_of(0x4fff), Some(1));
        assert_eq!(map.node_of(u64::MAX), None);
    }
}
