//! NUMA topology: nodes, their CPUs, memory and distances; memory tiers; the physical address
//! map; and the choice of promotion target.
//!
//! Read once at startup from a sysfs root (`/sys`, or a copied tree given with `--sysfs-root`,
//! so a trace recorded on a CXL box replays here against that box's topology). Only free memory
//! is read again later, by the migrators, for their watermark.
//!
//! Tiers come from `/sys/devices/virtual/memory_tiering/memory_tierN/nodelist`, following the
//! kernel's `node_is_toptier()`: every tier up to the slowest one that holds a CPU node is top
//! tier. Without that directory (kernels before 6.1, or no tiering), CPU-less memory nodes are
//! the lower tier.

pub mod physmap;
pub mod sysfs;

use std::path::PathBuf;

pub use physmap::PhysMap;
pub use sysfs::SysfsRoot;

/// A NUMA node id. The kernel's MAX_NUMNODES is at most 1024.
pub use pghot_protocol::NodeId;

#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    #[error("reading {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("parsing {}: {detail}", path.display())]
    Parse { path: PathBuf, detail: String },
    #[error("no NUMA nodes under {}", root.display())]
    NoNodes { root: PathBuf },
}

/// How tiers were decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TierSource {
    /// From `/sys/devices/virtual/memory_tiering`.
    MemoryTiering,
    /// No tiering in sysfs: CPU-less memory nodes are the lower tier.
    CpulessFallback,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub id: NodeId,
    pub cpus: Vec<u32>,
    pub mem_total_kb: u64,
    /// The kernel's memory tier number (`memory_tierN`), when tiering is known.
    pub tier: Option<u32>,
    pub top_tier: bool,
}

impl Node {
    pub fn has_memory(&self) -> bool {
        self.mem_total_kb > 0
    }
}

#[derive(Debug, Clone)]
pub struct Topology {
    sysfs: SysfsRoot,
    nodes: Vec<Node>,
    /// distances[i][j] between nodes[i] and nodes[j].
    distances: Vec<Vec<u32>>,
    tier_source: TierSource,
    physmap: PhysMap,
    /// Node of each CPU, indexed by cpu number.
    cpu_node: Vec<Option<NodeId>>,
}

const NODE_DIR: &str = "devices/system/node";

fn parse_err(sysfs: &SysfsRoot, rel: &str, detail: impl Into<String>) -> TopologyError {
    TopologyError::Parse {
        path: sysfs.path(rel),
        detail: detail.into(),
    }
}

/// `Node 0 MemTotal:  24555324 kB` -> 24555324 for key "MemTotal".
fn meminfo_kb(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        let (_node, _id, name, value) =
            (words.next()?, words.next()?, words.next()?, words.next()?);
        (name.strip_suffix(':') == Some(key)).then(|| value.parse().ok())?
    })
}

impl Topology {
    /// Reads the topology from a sysfs root.
    pub fn read(sysfs: SysfsRoot) -> Result<Topology, TopologyError> {
        let online_rel = format!("{NODE_DIR}/online");
        let node_ids: Vec<NodeId> = match sysfs.read_optional(&online_rel)? {
            Some(text) => sysfs::parse_list(&text)
                .ok_or_else(|| parse_err(&sysfs, &online_rel, format!("bad node list '{text}'")))?
                .into_iter()
                .map(|n| {
                    NodeId::try_from(n)
                        .map_err(|_| parse_err(&sysfs, &online_rel, format!("node {n} too large")))
                })
                .collect::<Result<_, _>>()?,
            None => sysfs
                .numbered_entries(NODE_DIR, "node")?
                .into_iter()
                .filter_map(|n| NodeId::try_from(n).ok())
                .collect(),
        };
        if node_ids.is_empty() {
            return Err(TopologyError::NoNodes {
                root: sysfs.root().to_path_buf(),
            });
        }

        let mut nodes = Vec::with_capacity(node_ids.len());
        let mut distances = Vec::with_capacity(node_ids.len());
        let mut blocks = Vec::new();
        for &id in &node_ids {
            let dir = format!("{NODE_DIR}/node{id}");
            let cpulist_rel = format!("{dir}/cpulist");
            let cpulist = sysfs.read(&cpulist_rel)?;
            let cpus = sysfs::parse_list(&cpulist).ok_or_else(|| {
                parse_err(&sysfs, &cpulist_rel, format!("bad cpu list '{cpulist}'"))
            })?;
            let meminfo_rel = format!("{dir}/meminfo");
            let meminfo = sysfs.read(&meminfo_rel)?;
            let mem_total_kb = meminfo_kb(&meminfo, "MemTotal")
                .ok_or_else(|| parse_err(&sysfs, &meminfo_rel, "no MemTotal line"))?;
            let distance_rel = format!("{dir}/distance");
            let text = sysfs.read(&distance_rel)?;
            let row: Vec<u32> = text
                .split_whitespace()
                .map(|d| d.parse::<u32>())
                .collect::<Result<_, _>>()
                .map_err(|_| parse_err(&sysfs, &distance_rel, format!("bad distances '{text}'")))?;
            if row.len() != node_ids.len() {
                return Err(parse_err(
                    &sysfs,
                    &distance_rel,
                    format!(
                        "{} distances for {} online nodes",
                        row.len(),
                        node_ids.len()
                    ),
                ));
            }
            distances.push(row);
            for block in sysfs.numbered_entries(&dir, "memory")? {
                blocks.push((id, block));
            }
            nodes.push(Node {
                id,
                cpus,
                mem_total_kb,
                tier: None,
                top_tier: true,
            });
        }

        let physmap = if blocks.is_empty() {
            PhysMap::default()
        } else {
            let rel = "devices/system/memory/block_size_bytes";
            let text = sysfs.read(rel)?;
            let block_size = u64::from_str_radix(text.trim_start_matches("0x"), 16)
                .ok()
                .filter(|&b| b > 0)
                .ok_or_else(|| parse_err(&sysfs, rel, format!("bad block size '{text}'")))?;
            PhysMap::from_blocks(block_size, blocks)
        };

        let tier_source = Self::assign_tiers(&sysfs, &mut nodes)?;
        let max_cpu = nodes.iter().flat_map(|n| n.cpus.iter().copied()).max();
        let mut cpu_node = vec![None; max_cpu.map_or(0, |c| c as usize + 1)];
        for node in &nodes {
            for &cpu in &node.cpus {
                cpu_node[cpu as usize] = Some(node.id);
            }
        }
        Ok(Topology {
            sysfs,
            nodes,
            distances,
            tier_source,
            physmap,
            cpu_node,
        })
    }

    /// A topology built from parts instead of sysfs, for the simulator (`pghot-sim`): `nodes`
    /// with their tiers set, `distances[i][j]` between `nodes[i]` and `nodes[j]`. It has no
    /// physical address map, and `free_kb` fails (the sysfs root does not exist), so its users
    /// supply free memory themselves (`migrator::capacity::FreeMemory`).
    pub fn synthetic(nodes: Vec<Node>, distances: Vec<Vec<u32>>) -> Topology {
        let max_cpu = nodes.iter().flat_map(|n| n.cpus.iter().copied()).max();
        let mut cpu_node = vec![None; max_cpu.map_or(0, |c| c as usize + 1)];
        for node in &nodes {
            for &cpu in &node.cpus {
                cpu_node[cpu as usize] = Some(node.id);
            }
        }
        Topology {
            sysfs: SysfsRoot::new("/nonexistent/pghot-sim"),
            nodes,
            distances,
            tier_source: TierSource::MemoryTiering,
            physmap: PhysMap::default(),
            cpu_node,
        }
    }

    fn assign_tiers(sysfs: &SysfsRoot, nodes: &mut [Node]) -> Result<TierSource, TopologyError> {
        let tiering_dir = "devices/virtual/memory_tiering";
        let tier_ids = sysfs.numbered_entries(tiering_dir, "memory_tier")?;
        for tier in &tier_ids {
            let rel = format!("{tiering_dir}/memory_tier{tier}/nodelist");
            let text = sysfs.read(&rel)?;
            let members = sysfs::parse_list(&text)
                .ok_or_else(|| parse_err(sysfs, &rel, format!("bad node list '{text}'")))?;
            for member in members {
                if let Some(node) = nodes.iter_mut().find(|n| u32::from(n.id) == member) {
                    node.tier = u32::try_from(*tier).ok();
                }
            }
        }
        if nodes.iter().all(|n| n.tier.is_none()) {
            for node in nodes.iter_mut() {
                node.top_tier = !(node.cpus.is_empty() && node.has_memory());
            }
            return Ok(TierSource::CpulessFallback);
        }
        // As node_is_toptier(): the top tier reaches down to the slowest tier holding a CPU node.
        let top_limit = nodes
            .iter()
            .filter(|n| !n.cpus.is_empty())
            .filter_map(|n| n.tier)
            .max();
        for node in nodes.iter_mut() {
            node.top_tier = match (node.tier, top_limit) {
                (None, _) | (_, None) => true,
                (Some(tier), Some(limit)) => tier <= limit,
            };
        }
        Ok(TierSource::MemoryTiering)
    }

    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    pub fn node(&self, id: NodeId) -> Option<&Node> {
        self.nodes.iter().find(|n| n.id == id)
    }

    pub fn tier_source(&self) -> TierSource {
        self.tier_source
    }

    pub fn physmap(&self) -> &PhysMap {
        &self.physmap
    }

    pub fn sysfs(&self) -> &SysfsRoot {
        &self.sysfs
    }

    /// A memory node that is not in the top tier: pages there are promotion candidates.
    pub fn is_lower_tier(&self, id: NodeId) -> bool {
        self.node(id).is_some_and(|n| !n.top_tier && n.has_memory())
    }

    /// Lower-tier memory nodes; one migrator runs per entry.
    pub fn lower_tier_nodes(&self) -> Vec<NodeId> {
        self.nodes
            .iter()
            .filter(|n| !n.top_tier && n.has_memory())
            .map(|n| n.id)
            .collect()
    }

    pub fn distance(&self, from: NodeId, to: NodeId) -> Option<u32> {
        let i = self.nodes.iter().position(|n| n.id == from)?;
        let j = self.nodes.iter().position(|n| n.id == to)?;
        Some(self.distances[i][j])
    }

    pub fn node_of_cpu(&self, cpu: u32) -> Option<NodeId> {
        self.cpu_node.get(cpu as usize).copied().flatten()
    }

    /// Number of CPU slots (highest cpu + 1).
    pub fn cpu_slots(&self) -> usize {
        self.cpu_node.len()
    }

    /// Where a page accessed from `cpu` should go: `target_nid` when set, else the top-tier
    /// memory node nearest to the CPU's node (ties go to the lower node id).
    pub fn promotion_target(&self, cpu: u32, target_nid: Option<NodeId>) -> Option<NodeId> {
        if target_nid.is_some() {
            return target_nid;
        }
        let from = self.node_of_cpu(cpu)?;
        self.nodes
            .iter()
            .filter(|n| n.top_tier && n.has_memory())
            .filter_map(|n| Some((self.distance(from, n.id)?, n.id)))
            .min()
            .map(|(_, id)| id)
    }

    /// Free memory of a node now, read from its meminfo.
    pub fn free_kb(&self, id: NodeId) -> Result<u64, TopologyError> {
        let rel = format!("{NODE_DIR}/node{id}/meminfo");
        let text = self.sysfs.read(&rel)?;
        meminfo_kb(&text, "MemFree").ok_or_else(|| parse_err(&self.sysfs, &rel, "no MemFree line"))
    }

    /// One line per node, for logs and status.
    pub fn summary(&self) -> String {
        self.nodes
            .iter()
            .map(|n| {
                format!(
                    "node{} {} tier {} cpus {} mem {} MiB",
                    n.id,
                    if n.top_tier { "top" } else { "lower" },
                    n.tier.map_or("-".to_string(), |t| t.to_string()),
                    if n.cpus.is_empty() {
                        "none".to_string()
                    } else {
                        format!("{}", n.cpus.len())
                    },
                    n.mem_total_kb / 1024
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// Writes a minimal fake sysfs tree.
    struct FakeSysfs {
        dir: tempfile::TempDir,
    }

    impl FakeSysfs {
        fn new() -> Self {
            FakeSysfs {
                dir: tempfile::tempdir().unwrap(),
            }
        }

        fn file(&self, rel: &str, text: &str) -> &Self {
            let path = self.dir.path().join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
            self
        }

        fn node(
            &self,
            id: u16,
            cpus: &str,
            total_kb: u64,
            distance: &str,
            blocks: &[u64],
        ) -> &Self {
            let dir = format!("{NODE_DIR}/node{id}");
            self.file(&format!("{dir}/cpulist"), &format!("{cpus}\n"));
            self.file(
                &format!("{dir}/meminfo"),
                &format!(
                    "Node {id} MemTotal: {total_kb} kB\nNode {id} MemFree: {} kB\n",
                    total_kb / 2
                ),
            );
            self.file(&format!("{dir}/distance"), &format!("{distance}\n"));
            for b in blocks {
                std::fs::create_dir_all(self.dir.path().join(format!("{dir}/memory{b}"))).unwrap();
            }
            self
        }

        fn root(&self) -> SysfsRoot {
            SysfsRoot::new(self.dir.path())
        }
    }

    #[test]
    fn cpuless_nodes_are_lower_tier_without_memory_tiering() {
        let fake = FakeSysfs::new();
        fake.file("devices/system/node/online", "0-1\n")
            .file("devices/system/memory/block_size_bytes", "8000000\n")
            .node(0, "0-1", 1 << 20, "10 20", &[0, 1])
            .node(1, "", 1 << 20, "20 10", &[2]);
        let topo = Topology::read(fake.root()).unwrap();
        assert_eq!(topo.tier_source(), TierSource::CpulessFallback);
        assert_eq!(topo.lower_tier_nodes(), vec![1]);
        assert_eq!(topo.physmap().node_of(0x1000_0000), Some(1));
        assert_eq!(topo.physmap().node_of(0x0fff_ffff), Some(0));
        assert_eq!(topo.promotion_target(1, None), Some(0));
        assert_eq!(topo.promotion_target(1, Some(5)), Some(5));
        assert_eq!(topo.promotion_target(9, None), None);
        assert_eq!(topo.free_kb(1).unwrap(), 1 << 19);
    }

    #[test]
    fn a_cpuless_node_in_the_dram_tier_is_top_tier() {
        // A qemu CPU-less node without HMAT lands in memory_tier4 with the DRAM nodes.
        let fake = FakeSysfs::new();
        fake.file("devices/system/node/online", "0-1")
            .file(
                "devices/virtual/memory_tiering/memory_tier4/nodelist",
                "0-1",
            )
            .node(0, "0", 1024, "10 20", &[])
            .node(1, "", 1024, "20 10", &[]);
        let topo = Topology::read(fake.root()).unwrap();
        assert_eq!(topo.tier_source(), TierSource::MemoryTiering);
        assert!(topo.lower_tier_nodes().is_empty());
    }

    #[test]
    fn malformed_files_are_named_in_the_error() {
        let fake = FakeSysfs::new();
        fake.file("devices/system/node/online", "0")
            .node(0, "0", 1024, "10 20", &[]);
        let err = Topology::read(fake.root()).unwrap_err().to_string();
        assert!(
            err.contains("node0/distance: 2 distances for 1 online nodes"),
            "{err}"
        );

        let fake = FakeSysfs::new();
        fake.file("devices/system/node/online", "0-x");
        let err = Topology::read(fake.root()).unwrap_err().to_string();
        assert!(err.contains("online: bad node list '0-x'"), "{err}");

        let err = Topology::read(SysfsRoot::new("/nonexistent"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("no NUMA nodes under /nonexistent"), "{err}");
    }

    fn fixture(name: &str) -> SysfsRoot {
        SysfsRoot::new(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/sysfs")
                .join(name),
        )
    }

    #[test]
    fn qemu_3node_fixture_has_one_lower_tier_node() {
        let topo = Topology::read(fixture("qemu-3node")).unwrap();
        assert_eq!(topo.tier_source(), TierSource::MemoryTiering);
        assert_eq!(topo.lower_tier_nodes(), vec![2]);
        assert_eq!(topo.node(2).unwrap().cpus, Vec::<u32>::new());
        assert_eq!(topo.distance(0, 2), Some(50));
        assert_eq!(topo.distance(0, 1), Some(12));
        // cpu0 is on node0, cpu1 on node1: each promotes to its own node.
        assert_eq!(topo.promotion_target(0, None), Some(0));
        assert_eq!(topo.promotion_target(1, None), Some(1));
        // Every node's blocks map back to it.
        for &(start, end, node) in topo.physmap().ranges() {
            assert_eq!(topo.physmap().node_of(start), Some(node));
            assert_eq!(topo.physmap().node_of(end - 1), Some(node));
        }
        let nodes: Vec<_> = topo.physmap().ranges().iter().map(|r| r.2).collect();
        assert!(nodes.contains(&2), "node2 has memory blocks: {nodes:?}");
        assert!(topo.free_kb(2).unwrap() > 0);
    }

    #[test]
    fn qemu_4node_fixture_has_two_lower_tier_nodes() {
        let topo = Topology::read(fixture("qemu-4node")).unwrap();
        assert_eq!(topo.lower_tier_nodes(), vec![2, 3]);
        assert!(topo.nodes()[0].top_tier && topo.nodes()[1].top_tier);
    }

    #[test]
    fn live_sysfs_reads_and_is_consistent() {
        let topo = Topology::read(SysfsRoot::new("/sys")).unwrap();
        assert!(!topo.nodes().is_empty());
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mapped = (0..topo.cpu_slots() as u32)
            .filter(|&c| topo.node_of_cpu(c).is_some())
            .count();
        assert!(mapped >= cpus, "{mapped} cpus mapped, {cpus} available");
        // Every CPU has a top-tier target on a real machine.
        assert!(topo.promotion_target(0, None).is_some());
        for node in topo.nodes() {
            assert_eq!(topo.distance(node.id, node.id), Some(10));
            if node.has_memory() {
                assert!(topo.free_kb(node.id).unwrap() <= node.mem_total_kb);
            }
        }
        // The live map resolves its own ranges.
        if let Some(&(start, _, node)) = topo.physmap().ranges().first() {
            assert_eq!(topo.physmap().node_of(start), Some(node));
        }
    }
}
