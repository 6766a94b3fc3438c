from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class OrderPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ORDER_POLICY_UNSPECIFIED: _ClassVar[OrderPolicy]
    ORDER_POLICY_DEFAULT: _ClassVar[OrderPolicy]
    ORDER_POLICY_MEGATRON_CLI: _ClassVar[OrderPolicy]
    ORDER_POLICY_ALL: _ClassVar[OrderPolicy]

class LaunchOrderPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LAUNCH_ORDER_POLICY_UNSPECIFIED: _ClassVar[LaunchOrderPolicy]
    LAUNCH_ORDER_POLICY_SORTED: _ClassVar[LaunchOrderPolicy]
    LAUNCH_ORDER_POLICY_LISTED: _ClassVar[LaunchOrderPolicy]

class Mode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MODE_UNSPECIFIED: _ClassVar[Mode]
    MODE_LAUNCHER: _ClassVar[Mode]
    MODE_FREE: _ClassVar[Mode]
    MODE_FIXED: _ClassVar[Mode]

class NcclAlgorithm(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NCCL_ALGORITHM_UNSPECIFIED: _ClassVar[NcclAlgorithm]
    NCCL_ALGORITHM_RING: _ClassVar[NcclAlgorithm]
    NCCL_ALGORITHM_TREE: _ClassVar[NcclAlgorithm]
    NCCL_ALGORITHM_NVLS: _ClassVar[NcclAlgorithm]
    NCCL_ALGORITHM_NVLSTREE: _ClassVar[NcclAlgorithm]

class BottleneckKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BOTTLENECK_KIND_UNSPECIFIED: _ClassVar[BottleneckKind]
    BOTTLENECK_KIND_NONE: _ClassVar[BottleneckKind]
    BOTTLENECK_KIND_LINK: _ClassVar[BottleneckKind]
    BOTTLENECK_KIND_PER_FLOW: _ClassVar[BottleneckKind]

class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STATUS_UNSPECIFIED: _ClassVar[Status]
    STATUS_OPTIMAL: _ClassVar[Status]
    STATUS_FEASIBLE: _ClassVar[Status]

class TopologyFormat(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOPOLOGY_FORMAT_UNSPECIFIED: _ClassVar[TopologyFormat]
    TOPOLOGY_FORMAT_SLURM_TOPOLOGY_CONF: _ClassVar[TopologyFormat]
    TOPOLOGY_FORMAT_SLURM_TOPOLOGY_YAML: _ClassVar[TopologyFormat]
    TOPOLOGY_FORMAT_KUBERNETES_NODES: _ClassVar[TopologyFormat]
    TOPOLOGY_FORMAT_VOLCANO_HYPERNODES: _ClassVar[TopologyFormat]
    TOPOLOGY_FORMAT_TOPOGRAPH_MODEL: _ClassVar[TopologyFormat]
    TOPOLOGY_FORMAT_IBNETDISCOVER: _ClassVar[TopologyFormat]
    TOPOLOGY_FORMAT_HOST_TOPOLOGY: _ClassVar[TopologyFormat]

class BlockLinks(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BLOCK_LINKS_UNSPECIFIED: _ClassVar[BlockLinks]
    BLOCK_LINKS_NVLINK: _ClassVar[BlockLinks]
    BLOCK_LINKS_NETWORK: _ClassVar[BlockLinks]

class LaunchFileKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LAUNCH_FILE_KIND_UNSPECIFIED: _ClassVar[LaunchFileKind]
    LAUNCH_FILE_KIND_HOSTFILE: _ClassVar[LaunchFileKind]
    LAUNCH_FILE_KIND_RANKFILE: _ClassVar[LaunchFileKind]
    LAUNCH_FILE_KIND_POD_MAP: _ClassVar[LaunchFileKind]
    LAUNCH_FILE_KIND_TORCHRUN: _ClassVar[LaunchFileKind]

class Scheduler(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SCHEDULER_UNSPECIFIED: _ClassVar[Scheduler]
    SCHEDULER_SLURM: _ClassVar[Scheduler]
    SCHEDULER_KUEUE: _ClassVar[Scheduler]
    SCHEDULER_VOLCANO: _ClassVar[Scheduler]
ORDER_POLICY_UNSPECIFIED: OrderPolicy
ORDER_POLICY_DEFAULT: OrderPolicy
ORDER_POLICY_MEGATRON_CLI: OrderPolicy
ORDER_POLICY_ALL: OrderPolicy
LAUNCH_ORDER_POLICY_UNSPECIFIED: LaunchOrderPolicy
LAUNCH_ORDER_POLICY_SORTED: LaunchOrderPolicy
LAUNCH_ORDER_POLICY_LISTED: LaunchOrderPolicy
MODE_UNSPECIFIED: Mode
MODE_LAUNCHER: Mode
MODE_FREE: Mode
MODE_FIXED: Mode
NCCL_ALGORITHM_UNSPECIFIED: NcclAlgorithm
NCCL_ALGORITHM_RING: NcclAlgorithm
NCCL_ALGORITHM_TREE: NcclAlgorithm
NCCL_ALGORITHM_NVLS: NcclAlgorithm
NCCL_ALGORITHM_NVLSTREE: NcclAlgorithm
BOTTLENECK_KIND_UNSPECIFIED: BottleneckKind
BOTTLENECK_KIND_NONE: BottleneckKind
BOTTLENECK_KIND_LINK: BottleneckKind
BOTTLENECK_KIND_PER_FLOW: BottleneckKind
STATUS_UNSPECIFIED: Status
STATUS_OPTIMAL: Status
STATUS_FEASIBLE: Status
TOPOLOGY_FORMAT_UNSPECIFIED: TopologyFormat
TOPOLOGY_FORMAT_SLURM_TOPOLOGY_CONF: TopologyFormat
TOPOLOGY_FORMAT_SLURM_TOPOLOGY_YAML: TopologyFormat
TOPOLOGY_FORMAT_KUBERNETES_NODES: TopologyFormat
TOPOLOGY_FORMAT_VOLCANO_HYPERNODES: TopologyFormat
TOPOLOGY_FORMAT_TOPOGRAPH_MODEL: TopologyFormat
TOPOLOGY_FORMAT_IBNETDISCOVER: TopologyFormat
TOPOLOGY_FORMAT_HOST_TOPOLOGY: TopologyFormat
BLOCK_LINKS_UNSPECIFIED: BlockLinks
BLOCK_LINKS_NVLINK: BlockLinks
BLOCK_LINKS_NETWORK: BlockLinks
LAUNCH_FILE_KIND_UNSPECIFIED: LaunchFileKind
LAUNCH_FILE_KIND_HOSTFILE: LaunchFileKind
LAUNCH_FILE_KIND_RANKFILE: LaunchFileKind
LAUNCH_FILE_KIND_POD_MAP: LaunchFileKind
LAUNCH_FILE_KIND_TORCHRUN: LaunchFileKind
SCHEDULER_UNSPECIFIED: Scheduler
SCHEDULER_SLURM: Scheduler
SCHEDULER_KUEUE: Scheduler
SCHEDULER_VOLCANO: Scheduler

class Device(_message.Message):
    __slots__ = ("id", "host", "local_index", "nvlink_domain")
    ID_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    LOCAL_INDEX_FIELD_NUMBER: _ClassVar[int]
    NVLINK_DOMAIN_FIELD_NUMBER: _ClassVar[int]
    id: str
    host: str
    local_index: int
    nvlink_domain: str
    def __init__(self, id: _Optional[str] = ..., host: _Optional[str] = ..., local_index: _Optional[int] = ..., nvlink_domain: _Optional[str] = ...) -> None: ...

class Node(_message.Message):
    __slots__ = ("id", "kind", "host", "nic_index")
    ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    NIC_INDEX_FIELD_NUMBER: _ClassVar[int]
    id: str
    kind: str
    host: str
    nic_index: int
    def __init__(self, id: _Optional[str] = ..., kind: _Optional[str] = ..., host: _Optional[str] = ..., nic_index: _Optional[int] = ...) -> None: ...

class Link(_message.Message):
    __slots__ = ("source", "target", "bandwidth_gbps", "latency_us", "kind", "nvlinks", "ports", "measured_gbps", "measured_source")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    BANDWIDTH_GBPS_FIELD_NUMBER: _ClassVar[int]
    LATENCY_US_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    NVLINKS_FIELD_NUMBER: _ClassVar[int]
    PORTS_FIELD_NUMBER: _ClassVar[int]
    MEASURED_GBPS_FIELD_NUMBER: _ClassVar[int]
    MEASURED_SOURCE_FIELD_NUMBER: _ClassVar[int]
    source: str
    target: str
    bandwidth_gbps: float
    latency_us: float
    kind: str
    nvlinks: float
    ports: float
    measured_gbps: float
    measured_source: str
    def __init__(self, source: _Optional[str] = ..., target: _Optional[str] = ..., bandwidth_gbps: _Optional[float] = ..., latency_us: _Optional[float] = ..., kind: _Optional[str] = ..., nvlinks: _Optional[float] = ..., ports: _Optional[float] = ..., measured_gbps: _Optional[float] = ..., measured_source: _Optional[str] = ...) -> None: ...

class Cluster(_message.Message):
    __slots__ = ("devices", "nodes", "links", "gpu")
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    LINKS_FIELD_NUMBER: _ClassVar[int]
    GPU_FIELD_NUMBER: _ClassVar[int]
    devices: _containers.RepeatedCompositeFieldContainer[Device]
    nodes: _containers.RepeatedCompositeFieldContainer[Node]
    links: _containers.RepeatedCompositeFieldContainer[Link]
    gpu: str
    def __init__(self, devices: _Optional[_Iterable[_Union[Device, _Mapping]]] = ..., nodes: _Optional[_Iterable[_Union[Node, _Mapping]]] = ..., links: _Optional[_Iterable[_Union[Link, _Mapping]]] = ..., gpu: _Optional[str] = ...) -> None: ...

class ParallelSizes(_message.Message):
    __slots__ = ("world_size", "tp", "cp", "ep", "etp", "pp", "num_distributed_optimizer_instances", "hierarchical_context_parallel_sizes")
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    TP_FIELD_NUMBER: _ClassVar[int]
    CP_FIELD_NUMBER: _ClassVar[int]
    EP_FIELD_NUMBER: _ClassVar[int]
    ETP_FIELD_NUMBER: _ClassVar[int]
    PP_FIELD_NUMBER: _ClassVar[int]
    NUM_DISTRIBUTED_OPTIMIZER_INSTANCES_FIELD_NUMBER: _ClassVar[int]
    HIERARCHICAL_CONTEXT_PARALLEL_SIZES_FIELD_NUMBER: _ClassVar[int]
    world_size: int
    tp: int
    cp: int
    ep: int
    etp: int
    pp: int
    num_distributed_optimizer_instances: int
    hierarchical_context_parallel_sizes: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, world_size: _Optional[int] = ..., tp: _Optional[int] = ..., cp: _Optional[int] = ..., ep: _Optional[int] = ..., etp: _Optional[int] = ..., pp: _Optional[int] = ..., num_distributed_optimizer_instances: _Optional[int] = ..., hierarchical_context_parallel_sizes: _Optional[_Iterable[int]] = ...) -> None: ...

class ParallelConfig(_message.Message):
    __slots__ = ("world_size", "tp", "cp", "ep", "etp", "dp", "edp", "pp", "order", "num_distributed_optimizer_instances", "hierarchical_context_parallel_sizes", "rank_offset")
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    TP_FIELD_NUMBER: _ClassVar[int]
    CP_FIELD_NUMBER: _ClassVar[int]
    EP_FIELD_NUMBER: _ClassVar[int]
    ETP_FIELD_NUMBER: _ClassVar[int]
    DP_FIELD_NUMBER: _ClassVar[int]
    EDP_FIELD_NUMBER: _ClassVar[int]
    PP_FIELD_NUMBER: _ClassVar[int]
    ORDER_FIELD_NUMBER: _ClassVar[int]
    NUM_DISTRIBUTED_OPTIMIZER_INSTANCES_FIELD_NUMBER: _ClassVar[int]
    HIERARCHICAL_CONTEXT_PARALLEL_SIZES_FIELD_NUMBER: _ClassVar[int]
    RANK_OFFSET_FIELD_NUMBER: _ClassVar[int]
    world_size: int
    tp: int
    cp: int
    ep: int
    etp: int
    dp: int
    edp: int
    pp: int
    order: str
    num_distributed_optimizer_instances: int
    hierarchical_context_parallel_sizes: _containers.RepeatedScalarFieldContainer[int]
    rank_offset: int
    def __init__(self, world_size: _Optional[int] = ..., tp: _Optional[int] = ..., cp: _Optional[int] = ..., ep: _Optional[int] = ..., etp: _Optional[int] = ..., dp: _Optional[int] = ..., edp: _Optional[int] = ..., pp: _Optional[int] = ..., order: _Optional[str] = ..., num_distributed_optimizer_instances: _Optional[int] = ..., hierarchical_context_parallel_sizes: _Optional[_Iterable[int]] = ..., rank_offset: _Optional[int] = ...) -> None: ...

class LaunchOrder(_message.Message):
    __slots__ = ("policy", "hosts")
    POLICY_FIELD_NUMBER: _ClassVar[int]
    HOSTS_FIELD_NUMBER: _ClassVar[int]
    policy: LaunchOrderPolicy
    hosts: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, policy: _Optional[_Union[LaunchOrderPolicy, str]] = ..., hosts: _Optional[_Iterable[str]] = ...) -> None: ...

class OrderSearch(_message.Message):
    __slots__ = ("policy", "orders")
    POLICY_FIELD_NUMBER: _ClassVar[int]
    ORDERS_FIELD_NUMBER: _ClassVar[int]
    policy: OrderPolicy
    orders: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, policy: _Optional[_Union[OrderPolicy, str]] = ..., orders: _Optional[_Iterable[str]] = ...) -> None: ...

class NcclOptions(_message.Message):
    __slots__ = ("algorithm", "disable_pxn", "rates_gbps", "disable_latency")
    class RatesGbpsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    ALGORITHM_FIELD_NUMBER: _ClassVar[int]
    DISABLE_PXN_FIELD_NUMBER: _ClassVar[int]
    RATES_GBPS_FIELD_NUMBER: _ClassVar[int]
    DISABLE_LATENCY_FIELD_NUMBER: _ClassVar[int]
    algorithm: NcclAlgorithm
    disable_pxn: bool
    rates_gbps: _containers.ScalarMap[str, float]
    disable_latency: bool
    def __init__(self, algorithm: _Optional[_Union[NcclAlgorithm, str]] = ..., disable_pxn: _Optional[bool] = ..., rates_gbps: _Optional[_Mapping[str, float]] = ..., disable_latency: _Optional[bool] = ...) -> None: ...

class ModelSpec(_message.Message):
    __slots__ = ("preset", "overrides")
    class OverridesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Value
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Value, _Mapping]] = ...) -> None: ...
    PRESET_FIELD_NUMBER: _ClassVar[int]
    OVERRIDES_FIELD_NUMBER: _ClassVar[int]
    preset: str
    overrides: _containers.MessageMap[str, Value]
    def __init__(self, preset: _Optional[str] = ..., overrides: _Optional[_Mapping[str, Value]] = ...) -> None: ...

class Traffic(_message.Message):
    __slots__ = ("bytes", "model", "megatron_args")
    class BytesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    BYTES_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MEGATRON_ARGS_FIELD_NUMBER: _ClassVar[int]
    bytes: _containers.ScalarMap[str, float]
    model: ModelSpec
    megatron_args: str
    def __init__(self, bytes: _Optional[_Mapping[str, float]] = ..., model: _Optional[_Union[ModelSpec, _Mapping]] = ..., megatron_args: _Optional[str] = ...) -> None: ...

class Constraint(_message.Message):
    __slots__ = ("traffic_class", "level")
    TRAFFIC_CLASS_FIELD_NUMBER: _ClassVar[int]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    traffic_class: str
    level: str
    def __init__(self, traffic_class: _Optional[str] = ..., level: _Optional[str] = ...) -> None: ...

class Value(_message.Message):
    __slots__ = ("null_value", "bool_value", "int_value", "double_value", "string_value", "list_value", "map_value")
    NULL_VALUE_FIELD_NUMBER: _ClassVar[int]
    BOOL_VALUE_FIELD_NUMBER: _ClassVar[int]
    INT_VALUE_FIELD_NUMBER: _ClassVar[int]
    DOUBLE_VALUE_FIELD_NUMBER: _ClassVar[int]
    STRING_VALUE_FIELD_NUMBER: _ClassVar[int]
    LIST_VALUE_FIELD_NUMBER: _ClassVar[int]
    MAP_VALUE_FIELD_NUMBER: _ClassVar[int]
    null_value: bool
    bool_value: bool
    int_value: int
    double_value: float
    string_value: str
    list_value: ValueList
    map_value: ValueMap
    def __init__(self, null_value: _Optional[bool] = ..., bool_value: _Optional[bool] = ..., int_value: _Optional[int] = ..., double_value: _Optional[float] = ..., string_value: _Optional[str] = ..., list_value: _Optional[_Union[ValueList, _Mapping]] = ..., map_value: _Optional[_Union[ValueMap, _Mapping]] = ...) -> None: ...

class ValueList(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedCompositeFieldContainer[Value]
    def __init__(self, values: _Optional[_Iterable[_Union[Value, _Mapping]]] = ...) -> None: ...

class ValueMap(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[KeyValue]
    def __init__(self, entries: _Optional[_Iterable[_Union[KeyValue, _Mapping]]] = ...) -> None: ...

class KeyValue(_message.Message):
    __slots__ = ("key", "value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: Value
    def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Value, _Mapping]] = ...) -> None: ...

class Cost(_message.Message):
    __slots__ = ("total_seconds", "by_class_seconds", "classes")
    class ByClassSecondsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class ClassesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: ClassCost
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[ClassCost, _Mapping]] = ...) -> None: ...
    TOTAL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    BY_CLASS_SECONDS_FIELD_NUMBER: _ClassVar[int]
    CLASSES_FIELD_NUMBER: _ClassVar[int]
    total_seconds: float
    by_class_seconds: _containers.ScalarMap[str, float]
    classes: _containers.MessageMap[str, ClassCost]
    def __init__(self, total_seconds: _Optional[float] = ..., by_class_seconds: _Optional[_Mapping[str, float]] = ..., classes: _Optional[_Mapping[str, ClassCost]] = ...) -> None: ...

class ClassCost(_message.Message):
    __slots__ = ("seconds", "exposure", "bytes_per_rank", "payload_bytes", "latency_seconds", "bottleneck", "algorithm", "channels")
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    EXPOSURE_FIELD_NUMBER: _ClassVar[int]
    BYTES_PER_RANK_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_BYTES_FIELD_NUMBER: _ClassVar[int]
    LATENCY_SECONDS_FIELD_NUMBER: _ClassVar[int]
    BOTTLENECK_FIELD_NUMBER: _ClassVar[int]
    ALGORITHM_FIELD_NUMBER: _ClassVar[int]
    CHANNELS_FIELD_NUMBER: _ClassVar[int]
    seconds: float
    exposure: float
    bytes_per_rank: float
    payload_bytes: float
    latency_seconds: float
    bottleneck: Bottleneck
    algorithm: str
    channels: int
    def __init__(self, seconds: _Optional[float] = ..., exposure: _Optional[float] = ..., bytes_per_rank: _Optional[float] = ..., payload_bytes: _Optional[float] = ..., latency_seconds: _Optional[float] = ..., bottleneck: _Optional[_Union[Bottleneck, _Mapping]] = ..., algorithm: _Optional[str] = ..., channels: _Optional[int] = ...) -> None: ...

class Bottleneck(_message.Message):
    __slots__ = ("kind", "link_from", "link_to", "load_bytes", "capacity_gbps", "utilization", "flows", "flow_bytes", "flow_gbps")
    KIND_FIELD_NUMBER: _ClassVar[int]
    LINK_FROM_FIELD_NUMBER: _ClassVar[int]
    LINK_TO_FIELD_NUMBER: _ClassVar[int]
    LOAD_BYTES_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_GBPS_FIELD_NUMBER: _ClassVar[int]
    UTILIZATION_FIELD_NUMBER: _ClassVar[int]
    FLOWS_FIELD_NUMBER: _ClassVar[int]
    FLOW_BYTES_FIELD_NUMBER: _ClassVar[int]
    FLOW_GBPS_FIELD_NUMBER: _ClassVar[int]
    kind: BottleneckKind
    link_from: str
    link_to: str
    load_bytes: float
    capacity_gbps: float
    utilization: float
    flows: int
    flow_bytes: float
    flow_gbps: float
    def __init__(self, kind: _Optional[_Union[BottleneckKind, str]] = ..., link_from: _Optional[str] = ..., link_to: _Optional[str] = ..., load_bytes: _Optional[float] = ..., capacity_gbps: _Optional[float] = ..., utilization: _Optional[float] = ..., flows: _Optional[int] = ..., flow_bytes: _Optional[float] = ..., flow_gbps: _Optional[float] = ...) -> None: ...

class Layout(_message.Message):
    __slots__ = ("order", "assignment", "cost")
    ORDER_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    COST_FIELD_NUMBER: _ClassVar[int]
    order: str
    assignment: _containers.RepeatedScalarFieldContainer[str]
    cost: Cost
    def __init__(self, order: _Optional[str] = ..., assignment: _Optional[_Iterable[str]] = ..., cost: _Optional[_Union[Cost, _Mapping]] = ...) -> None: ...

class HostPlacement(_message.Message):
    __slots__ = ("host", "node_rank", "cuda_visible_devices", "global_ranks")
    HOST_FIELD_NUMBER: _ClassVar[int]
    NODE_RANK_FIELD_NUMBER: _ClassVar[int]
    CUDA_VISIBLE_DEVICES_FIELD_NUMBER: _ClassVar[int]
    GLOBAL_RANKS_FIELD_NUMBER: _ClassVar[int]
    host: str
    node_rank: int
    cuda_visible_devices: _containers.RepeatedScalarFieldContainer[int]
    global_ranks: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, host: _Optional[str] = ..., node_rank: _Optional[int] = ..., cuda_visible_devices: _Optional[_Iterable[int]] = ..., global_ranks: _Optional[_Iterable[int]] = ...) -> None: ...

class RankGroup(_message.Message):
    __slots__ = ("ranks",)
    RANKS_FIELD_NUMBER: _ClassVar[int]
    ranks: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, ranks: _Optional[_Iterable[int]] = ...) -> None: ...

class RankGroups(_message.Message):
    __slots__ = ("groups",)
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedCompositeFieldContainer[RankGroup]
    def __init__(self, groups: _Optional[_Iterable[_Union[RankGroup, _Mapping]]] = ...) -> None: ...

class SlurmLaunch(_message.Message):
    __slots__ = ("hostfile", "command")
    HOSTFILE_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    hostfile: _containers.RepeatedScalarFieldContainer[str]
    command: str
    def __init__(self, hostfile: _Optional[_Iterable[str]] = ..., command: _Optional[str] = ...) -> None: ...

class TorchrunLaunch(_message.Message):
    __slots__ = ("host", "node_rank", "command")
    HOST_FIELD_NUMBER: _ClassVar[int]
    NODE_RANK_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    host: str
    node_rank: int
    command: str
    def __init__(self, host: _Optional[str] = ..., node_rank: _Optional[int] = ..., command: _Optional[str] = ...) -> None: ...

class MpirunLaunch(_message.Message):
    __slots__ = ("rankfile", "command")
    RANKFILE_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    rankfile: _containers.RepeatedScalarFieldContainer[str]
    command: str
    def __init__(self, rankfile: _Optional[_Iterable[str]] = ..., command: _Optional[str] = ...) -> None: ...

class KubernetesLaunch(_message.Message):
    __slots__ = ("pod_nodes", "cuda_visible_devices", "command")
    POD_NODES_FIELD_NUMBER: _ClassVar[int]
    CUDA_VISIBLE_DEVICES_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    pod_nodes: _containers.RepeatedScalarFieldContainer[str]
    cuda_visible_devices: _containers.RepeatedScalarFieldContainer[str]
    command: str
    def __init__(self, pod_nodes: _Optional[_Iterable[str]] = ..., cuda_visible_devices: _Optional[_Iterable[str]] = ..., command: _Optional[str] = ...) -> None: ...

class ApplyInfo(_message.Message):
    __slots__ = ("entries", "rendezvous", "slurm", "torchrun", "mpirun", "kubernetes", "unavailable", "gpus_file")
    class UnavailableEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    RENDEZVOUS_FIELD_NUMBER: _ClassVar[int]
    SLURM_FIELD_NUMBER: _ClassVar[int]
    TORCHRUN_FIELD_NUMBER: _ClassVar[int]
    MPIRUN_FIELD_NUMBER: _ClassVar[int]
    KUBERNETES_FIELD_NUMBER: _ClassVar[int]
    UNAVAILABLE_FIELD_NUMBER: _ClassVar[int]
    GPUS_FILE_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[KeyValue]
    rendezvous: str
    slurm: SlurmLaunch
    torchrun: _containers.RepeatedCompositeFieldContainer[TorchrunLaunch]
    mpirun: MpirunLaunch
    kubernetes: KubernetesLaunch
    unavailable: _containers.ScalarMap[str, str]
    gpus_file: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, entries: _Optional[_Iterable[_Union[KeyValue, _Mapping]]] = ..., rendezvous: _Optional[str] = ..., slurm: _Optional[_Union[SlurmLaunch, _Mapping]] = ..., torchrun: _Optional[_Iterable[_Union[TorchrunLaunch, _Mapping]]] = ..., mpirun: _Optional[_Union[MpirunLaunch, _Mapping]] = ..., kubernetes: _Optional[_Union[KubernetesLaunch, _Mapping]] = ..., unavailable: _Optional[_Mapping[str, str]] = ..., gpus_file: _Optional[_Iterable[str]] = ...) -> None: ...

class SolveRequest(_message.Message):
    __slots__ = ("cluster", "sizes", "orders", "mode", "traffic", "constraints", "exclude_devices", "exclude_hosts", "time_limit_seconds", "seed", "omit_groups", "exposure", "launch_order", "nccl", "measured", "exclude_slow")
    class ExposureEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    SIZES_FIELD_NUMBER: _ClassVar[int]
    ORDERS_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    TRAFFIC_FIELD_NUMBER: _ClassVar[int]
    CONSTRAINTS_FIELD_NUMBER: _ClassVar[int]
    EXCLUDE_DEVICES_FIELD_NUMBER: _ClassVar[int]
    EXCLUDE_HOSTS_FIELD_NUMBER: _ClassVar[int]
    TIME_LIMIT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    OMIT_GROUPS_FIELD_NUMBER: _ClassVar[int]
    EXPOSURE_FIELD_NUMBER: _ClassVar[int]
    LAUNCH_ORDER_FIELD_NUMBER: _ClassVar[int]
    NCCL_FIELD_NUMBER: _ClassVar[int]
    MEASURED_FIELD_NUMBER: _ClassVar[int]
    EXCLUDE_SLOW_FIELD_NUMBER: _ClassVar[int]
    cluster: Cluster
    sizes: ParallelSizes
    orders: OrderSearch
    mode: Mode
    traffic: Traffic
    constraints: _containers.RepeatedCompositeFieldContainer[Constraint]
    exclude_devices: _containers.RepeatedScalarFieldContainer[str]
    exclude_hosts: _containers.RepeatedScalarFieldContainer[str]
    time_limit_seconds: float
    seed: int
    omit_groups: bool
    exposure: _containers.ScalarMap[str, float]
    launch_order: LaunchOrder
    nccl: NcclOptions
    measured: _containers.RepeatedCompositeFieldContainer[Measurement]
    exclude_slow: float
    def __init__(self, cluster: _Optional[_Union[Cluster, _Mapping]] = ..., sizes: _Optional[_Union[ParallelSizes, _Mapping]] = ..., orders: _Optional[_Union[OrderSearch, _Mapping]] = ..., mode: _Optional[_Union[Mode, str]] = ..., traffic: _Optional[_Union[Traffic, _Mapping]] = ..., constraints: _Optional[_Iterable[_Union[Constraint, _Mapping]]] = ..., exclude_devices: _Optional[_Iterable[str]] = ..., exclude_hosts: _Optional[_Iterable[str]] = ..., time_limit_seconds: _Optional[float] = ..., seed: _Optional[int] = ..., omit_groups: _Optional[bool] = ..., exposure: _Optional[_Mapping[str, float]] = ..., launch_order: _Optional[_Union[LaunchOrder, _Mapping]] = ..., nccl: _Optional[_Union[NcclOptions, _Mapping]] = ..., measured: _Optional[_Iterable[_Union[Measurement, _Mapping]]] = ..., exclude_slow: _Optional[float] = ...) -> None: ...

class SolveResponse(_message.Message):
    __slots__ = ("config", "mode", "order", "assignment", "hosts", "cost", "baseline", "improvement", "status", "bound_seconds", "solve_seconds", "groups", "traffic_bytes", "orders_searched", "apply", "stopped_by", "traffic_model", "traffic_explicit", "nccl", "measured_links", "warnings", "excluded_slow_hosts")
    class GroupsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: RankGroups
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[RankGroups, _Mapping]] = ...) -> None: ...
    class TrafficBytesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class TrafficExplicitEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    ORDER_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    HOSTS_FIELD_NUMBER: _ClassVar[int]
    COST_FIELD_NUMBER: _ClassVar[int]
    BASELINE_FIELD_NUMBER: _ClassVar[int]
    IMPROVEMENT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    BOUND_SECONDS_FIELD_NUMBER: _ClassVar[int]
    SOLVE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    TRAFFIC_BYTES_FIELD_NUMBER: _ClassVar[int]
    ORDERS_SEARCHED_FIELD_NUMBER: _ClassVar[int]
    APPLY_FIELD_NUMBER: _ClassVar[int]
    STOPPED_BY_FIELD_NUMBER: _ClassVar[int]
    TRAFFIC_MODEL_FIELD_NUMBER: _ClassVar[int]
    TRAFFIC_EXPLICIT_FIELD_NUMBER: _ClassVar[int]
    NCCL_FIELD_NUMBER: _ClassVar[int]
    MEASURED_LINKS_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    EXCLUDED_SLOW_HOSTS_FIELD_NUMBER: _ClassVar[int]
    config: ParallelConfig
    mode: Mode
    order: str
    assignment: _containers.RepeatedScalarFieldContainer[str]
    hosts: _containers.RepeatedCompositeFieldContainer[HostPlacement]
    cost: Cost
    baseline: Layout
    improvement: float
    status: Status
    bound_seconds: float
    solve_seconds: float
    groups: _containers.MessageMap[str, RankGroups]
    traffic_bytes: _containers.ScalarMap[str, float]
    orders_searched: _containers.RepeatedScalarFieldContainer[str]
    apply: ApplyInfo
    stopped_by: str
    traffic_model: ModelSpec
    traffic_explicit: _containers.ScalarMap[str, float]
    nccl: NcclOptions
    measured_links: _containers.RepeatedCompositeFieldContainer[MeasuredLink]
    warnings: _containers.RepeatedScalarFieldContainer[str]
    excluded_slow_hosts: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, config: _Optional[_Union[ParallelConfig, _Mapping]] = ..., mode: _Optional[_Union[Mode, str]] = ..., order: _Optional[str] = ..., assignment: _Optional[_Iterable[str]] = ..., hosts: _Optional[_Iterable[_Union[HostPlacement, _Mapping]]] = ..., cost: _Optional[_Union[Cost, _Mapping]] = ..., baseline: _Optional[_Union[Layout, _Mapping]] = ..., improvement: _Optional[float] = ..., status: _Optional[_Union[Status, str]] = ..., bound_seconds: _Optional[float] = ..., solve_seconds: _Optional[float] = ..., groups: _Optional[_Mapping[str, RankGroups]] = ..., traffic_bytes: _Optional[_Mapping[str, float]] = ..., orders_searched: _Optional[_Iterable[str]] = ..., apply: _Optional[_Union[ApplyInfo, _Mapping]] = ..., stopped_by: _Optional[str] = ..., traffic_model: _Optional[_Union[ModelSpec, _Mapping]] = ..., traffic_explicit: _Optional[_Mapping[str, float]] = ..., nccl: _Optional[_Union[NcclOptions, _Mapping]] = ..., measured_links: _Optional[_Iterable[_Union[MeasuredLink, _Mapping]]] = ..., warnings: _Optional[_Iterable[str]] = ..., excluded_slow_hosts: _Optional[_Iterable[str]] = ...) -> None: ...

class EvaluateRequest(_message.Message):
    __slots__ = ("cluster", "sizes", "order", "assignment", "traffic", "exposure", "nccl", "measured")
    class ExposureEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    SIZES_FIELD_NUMBER: _ClassVar[int]
    ORDER_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    TRAFFIC_FIELD_NUMBER: _ClassVar[int]
    EXPOSURE_FIELD_NUMBER: _ClassVar[int]
    NCCL_FIELD_NUMBER: _ClassVar[int]
    MEASURED_FIELD_NUMBER: _ClassVar[int]
    cluster: Cluster
    sizes: ParallelSizes
    order: str
    assignment: _containers.RepeatedScalarFieldContainer[str]
    traffic: Traffic
    exposure: _containers.ScalarMap[str, float]
    nccl: NcclOptions
    measured: _containers.RepeatedCompositeFieldContainer[Measurement]
    def __init__(self, cluster: _Optional[_Union[Cluster, _Mapping]] = ..., sizes: _Optional[_Union[ParallelSizes, _Mapping]] = ..., order: _Optional[str] = ..., assignment: _Optional[_Iterable[str]] = ..., traffic: _Optional[_Union[Traffic, _Mapping]] = ..., exposure: _Optional[_Mapping[str, float]] = ..., nccl: _Optional[_Union[NcclOptions, _Mapping]] = ..., measured: _Optional[_Iterable[_Union[Measurement, _Mapping]]] = ...) -> None: ...

class EvaluateResponse(_message.Message):
    __slots__ = ("cost", "traffic_bytes", "measured_links", "warnings")
    class TrafficBytesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    COST_FIELD_NUMBER: _ClassVar[int]
    TRAFFIC_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEASURED_LINKS_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    cost: Cost
    traffic_bytes: _containers.ScalarMap[str, float]
    measured_links: _containers.RepeatedCompositeFieldContainer[MeasuredLink]
    warnings: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, cost: _Optional[_Union[Cost, _Mapping]] = ..., traffic_bytes: _Optional[_Mapping[str, float]] = ..., measured_links: _Optional[_Iterable[_Union[MeasuredLink, _Mapping]]] = ..., warnings: _Optional[_Iterable[str]] = ...) -> None: ...

class Measurement(_message.Message):
    __slots__ = ("a", "b", "gbps", "source", "gpus_per_host", "devices_a", "devices_b")
    A_FIELD_NUMBER: _ClassVar[int]
    B_FIELD_NUMBER: _ClassVar[int]
    GBPS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    GPUS_PER_HOST_FIELD_NUMBER: _ClassVar[int]
    DEVICES_A_FIELD_NUMBER: _ClassVar[int]
    DEVICES_B_FIELD_NUMBER: _ClassVar[int]
    a: str
    b: str
    gbps: float
    source: str
    gpus_per_host: int
    devices_a: _containers.RepeatedScalarFieldContainer[int]
    devices_b: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, a: _Optional[str] = ..., b: _Optional[str] = ..., gbps: _Optional[float] = ..., source: _Optional[str] = ..., gpus_per_host: _Optional[int] = ..., devices_a: _Optional[_Iterable[int]] = ..., devices_b: _Optional[_Iterable[int]] = ...) -> None: ...

class MeasuredLink(_message.Message):
    __slots__ = ("source_node", "target_node", "measured_gbps", "line_gbps", "source", "classes")
    SOURCE_NODE_FIELD_NUMBER: _ClassVar[int]
    TARGET_NODE_FIELD_NUMBER: _ClassVar[int]
    MEASURED_GBPS_FIELD_NUMBER: _ClassVar[int]
    LINE_GBPS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    CLASSES_FIELD_NUMBER: _ClassVar[int]
    source_node: str
    target_node: str
    measured_gbps: float
    line_gbps: float
    source: str
    classes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, source_node: _Optional[str] = ..., target_node: _Optional[str] = ..., measured_gbps: _Optional[float] = ..., line_gbps: _Optional[float] = ..., source: _Optional[str] = ..., classes: _Optional[_Iterable[str]] = ...) -> None: ...

class GetGroupsRequest(_message.Message):
    __slots__ = ("sizes", "order")
    SIZES_FIELD_NUMBER: _ClassVar[int]
    ORDER_FIELD_NUMBER: _ClassVar[int]
    sizes: ParallelSizes
    order: str
    def __init__(self, sizes: _Optional[_Union[ParallelSizes, _Mapping]] = ..., order: _Optional[str] = ...) -> None: ...

class GetGroupsResponse(_message.Message):
    __slots__ = ("config", "groups")
    class GroupsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: RankGroups
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[RankGroups, _Mapping]] = ...) -> None: ...
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    config: ParallelConfig
    groups: _containers.MessageMap[str, RankGroups]
    def __init__(self, config: _Optional[_Union[ParallelConfig, _Mapping]] = ..., groups: _Optional[_Mapping[str, RankGroups]] = ...) -> None: ...

class BatchSolveRequest(_message.Message):
    __slots__ = ("requests",)
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    requests: _containers.RepeatedCompositeFieldContainer[SolveRequest]
    def __init__(self, requests: _Optional[_Iterable[_Union[SolveRequest, _Mapping]]] = ...) -> None: ...

class Error(_message.Message):
    __slots__ = ("code", "message", "field", "argument")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    FIELD_FIELD_NUMBER: _ClassVar[int]
    ARGUMENT_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    field: str
    argument: str
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ..., field: _Optional[str] = ..., argument: _Optional[str] = ...) -> None: ...

class BatchSolveResponse(_message.Message):
    __slots__ = ("index", "result", "error")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    index: int
    result: SolveResponse
    error: Error
    def __init__(self, index: _Optional[int] = ..., result: _Optional[_Union[SolveResponse, _Mapping]] = ..., error: _Optional[_Union[Error, _Mapping]] = ...) -> None: ...

class ImportClusterRequest(_message.Message):
    __slots__ = ("format", "text", "source_name", "host_topology", "kubernetes_nodes", "topology_labels", "kueue_topology", "nvlink_domains", "nvlink_domain_rate_gbps", "gpu", "gpus_per_node", "nodelist", "topology_name", "rates_gbps", "oversubscription", "block_links")
    class RatesGbpsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    SOURCE_NAME_FIELD_NUMBER: _ClassVar[int]
    HOST_TOPOLOGY_FIELD_NUMBER: _ClassVar[int]
    KUBERNETES_NODES_FIELD_NUMBER: _ClassVar[int]
    TOPOLOGY_LABELS_FIELD_NUMBER: _ClassVar[int]
    KUEUE_TOPOLOGY_FIELD_NUMBER: _ClassVar[int]
    NVLINK_DOMAINS_FIELD_NUMBER: _ClassVar[int]
    NVLINK_DOMAIN_RATE_GBPS_FIELD_NUMBER: _ClassVar[int]
    GPU_FIELD_NUMBER: _ClassVar[int]
    GPUS_PER_NODE_FIELD_NUMBER: _ClassVar[int]
    NODELIST_FIELD_NUMBER: _ClassVar[int]
    TOPOLOGY_NAME_FIELD_NUMBER: _ClassVar[int]
    RATES_GBPS_FIELD_NUMBER: _ClassVar[int]
    OVERSUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    BLOCK_LINKS_FIELD_NUMBER: _ClassVar[int]
    format: TopologyFormat
    text: str
    source_name: str
    host_topology: str
    kubernetes_nodes: str
    topology_labels: _containers.RepeatedScalarFieldContainer[str]
    kueue_topology: str
    nvlink_domains: str
    nvlink_domain_rate_gbps: float
    gpu: str
    gpus_per_node: int
    nodelist: str
    topology_name: str
    rates_gbps: _containers.ScalarMap[str, float]
    oversubscription: _containers.RepeatedScalarFieldContainer[float]
    block_links: BlockLinks
    def __init__(self, format: _Optional[_Union[TopologyFormat, str]] = ..., text: _Optional[str] = ..., source_name: _Optional[str] = ..., host_topology: _Optional[str] = ..., kubernetes_nodes: _Optional[str] = ..., topology_labels: _Optional[_Iterable[str]] = ..., kueue_topology: _Optional[str] = ..., nvlink_domains: _Optional[str] = ..., nvlink_domain_rate_gbps: _Optional[float] = ..., gpu: _Optional[str] = ..., gpus_per_node: _Optional[int] = ..., nodelist: _Optional[str] = ..., topology_name: _Optional[str] = ..., rates_gbps: _Optional[_Mapping[str, float]] = ..., oversubscription: _Optional[_Iterable[float]] = ..., block_links: _Optional[_Union[BlockLinks, str]] = ...) -> None: ...

class ImportClusterResponse(_message.Message):
    __slots__ = ("cluster", "warnings", "name", "gpu", "nvlink_domains", "nvlink_domain_rate_gbps")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    GPU_FIELD_NUMBER: _ClassVar[int]
    NVLINK_DOMAINS_FIELD_NUMBER: _ClassVar[int]
    NVLINK_DOMAIN_RATE_GBPS_FIELD_NUMBER: _ClassVar[int]
    cluster: Cluster
    warnings: _containers.RepeatedScalarFieldContainer[str]
    name: str
    gpu: str
    nvlink_domains: int
    nvlink_domain_rate_gbps: float
    def __init__(self, cluster: _Optional[_Union[Cluster, _Mapping]] = ..., warnings: _Optional[_Iterable[str]] = ..., name: _Optional[str] = ..., gpu: _Optional[str] = ..., nvlink_domains: _Optional[int] = ..., nvlink_domain_rate_gbps: _Optional[float] = ...) -> None: ...

class LaunchFile(_message.Message):
    __slots__ = ("kind", "text", "source_name", "gpus_file", "cuda_visible_devices")
    KIND_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    SOURCE_NAME_FIELD_NUMBER: _ClassVar[int]
    GPUS_FILE_FIELD_NUMBER: _ClassVar[int]
    CUDA_VISIBLE_DEVICES_FIELD_NUMBER: _ClassVar[int]
    kind: LaunchFileKind
    text: str
    source_name: str
    gpus_file: str
    cuda_visible_devices: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, kind: _Optional[_Union[LaunchFileKind, str]] = ..., text: _Optional[str] = ..., source_name: _Optional[str] = ..., gpus_file: _Optional[str] = ..., cuda_visible_devices: _Optional[_Iterable[int]] = ...) -> None: ...

class CheckRequest(_message.Message):
    __slots__ = ("cluster", "sizes", "order", "assignment", "launch_file", "within", "traffic", "exposure", "nccl", "skip_best", "time_limit_seconds", "seed")
    class ExposureEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    SIZES_FIELD_NUMBER: _ClassVar[int]
    ORDER_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    LAUNCH_FILE_FIELD_NUMBER: _ClassVar[int]
    WITHIN_FIELD_NUMBER: _ClassVar[int]
    TRAFFIC_FIELD_NUMBER: _ClassVar[int]
    EXPOSURE_FIELD_NUMBER: _ClassVar[int]
    NCCL_FIELD_NUMBER: _ClassVar[int]
    SKIP_BEST_FIELD_NUMBER: _ClassVar[int]
    TIME_LIMIT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    cluster: Cluster
    sizes: ParallelSizes
    order: str
    assignment: _containers.RepeatedScalarFieldContainer[str]
    launch_file: LaunchFile
    within: _containers.RepeatedCompositeFieldContainer[Constraint]
    traffic: Traffic
    exposure: _containers.ScalarMap[str, float]
    nccl: NcclOptions
    skip_best: bool
    time_limit_seconds: float
    seed: int
    def __init__(self, cluster: _Optional[_Union[Cluster, _Mapping]] = ..., sizes: _Optional[_Union[ParallelSizes, _Mapping]] = ..., order: _Optional[str] = ..., assignment: _Optional[_Iterable[str]] = ..., launch_file: _Optional[_Union[LaunchFile, _Mapping]] = ..., within: _Optional[_Iterable[_Union[Constraint, _Mapping]]] = ..., traffic: _Optional[_Union[Traffic, _Mapping]] = ..., exposure: _Optional[_Mapping[str, float]] = ..., nccl: _Optional[_Union[NcclOptions, _Mapping]] = ..., skip_best: _Optional[bool] = ..., time_limit_seconds: _Optional[float] = ..., seed: _Optional[int] = ...) -> None: ...

class Violation(_message.Message):
    __slots__ = ("traffic_class", "level", "group", "domains")
    TRAFFIC_CLASS_FIELD_NUMBER: _ClassVar[int]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    DOMAINS_FIELD_NUMBER: _ClassVar[int]
    traffic_class: str
    level: str
    group: _containers.RepeatedScalarFieldContainer[int]
    domains: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, traffic_class: _Optional[str] = ..., level: _Optional[str] = ..., group: _Optional[_Iterable[int]] = ..., domains: _Optional[_Iterable[str]] = ...) -> None: ...

class RequirementSummary(_message.Message):
    __slots__ = ("requirement", "groups", "violations")
    REQUIREMENT_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    VIOLATIONS_FIELD_NUMBER: _ClassVar[int]
    requirement: Constraint
    groups: int
    violations: int
    def __init__(self, requirement: _Optional[_Union[Constraint, _Mapping]] = ..., groups: _Optional[int] = ..., violations: _Optional[int] = ...) -> None: ...

class CheckResponse(_message.Message):
    __slots__ = ("config", "assignment", "hosts", "requirements", "violations", "cost", "best", "best_note", "traffic_bytes")
    class TrafficBytesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    HOSTS_FIELD_NUMBER: _ClassVar[int]
    REQUIREMENTS_FIELD_NUMBER: _ClassVar[int]
    VIOLATIONS_FIELD_NUMBER: _ClassVar[int]
    COST_FIELD_NUMBER: _ClassVar[int]
    BEST_FIELD_NUMBER: _ClassVar[int]
    BEST_NOTE_FIELD_NUMBER: _ClassVar[int]
    TRAFFIC_BYTES_FIELD_NUMBER: _ClassVar[int]
    config: ParallelConfig
    assignment: _containers.RepeatedScalarFieldContainer[str]
    hosts: _containers.RepeatedScalarFieldContainer[str]
    requirements: _containers.RepeatedCompositeFieldContainer[RequirementSummary]
    violations: _containers.RepeatedCompositeFieldContainer[Violation]
    cost: Cost
    best: Layout
    best_note: str
    traffic_bytes: _containers.ScalarMap[str, float]
    def __init__(self, config: _Optional[_Union[ParallelConfig, _Mapping]] = ..., assignment: _Optional[_Iterable[str]] = ..., hosts: _Optional[_Iterable[str]] = ..., requirements: _Optional[_Iterable[_Union[RequirementSummary, _Mapping]]] = ..., violations: _Optional[_Iterable[_Union[Violation, _Mapping]]] = ..., cost: _Optional[_Union[Cost, _Mapping]] = ..., best: _Optional[_Union[Layout, _Mapping]] = ..., best_note: _Optional[str] = ..., traffic_bytes: _Optional[_Mapping[str, float]] = ...) -> None: ...

class RecommendAllocationRequest(_message.Message):
    __slots__ = ("sizes", "order", "cluster", "nvlink_domain_size", "gpus_per_node", "within", "schedulers", "nodes_per_leaf", "nvlink_label", "pack_label", "volcano_nvlink_tier", "max_wait")
    SIZES_FIELD_NUMBER: _ClassVar[int]
    ORDER_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    NVLINK_DOMAIN_SIZE_FIELD_NUMBER: _ClassVar[int]
    GPUS_PER_NODE_FIELD_NUMBER: _ClassVar[int]
    WITHIN_FIELD_NUMBER: _ClassVar[int]
    SCHEDULERS_FIELD_NUMBER: _ClassVar[int]
    NODES_PER_LEAF_FIELD_NUMBER: _ClassVar[int]
    NVLINK_LABEL_FIELD_NUMBER: _ClassVar[int]
    PACK_LABEL_FIELD_NUMBER: _ClassVar[int]
    VOLCANO_NVLINK_TIER_FIELD_NUMBER: _ClassVar[int]
    MAX_WAIT_FIELD_NUMBER: _ClassVar[int]
    sizes: ParallelSizes
    order: str
    cluster: Cluster
    nvlink_domain_size: int
    gpus_per_node: int
    within: _containers.RepeatedCompositeFieldContainer[Constraint]
    schedulers: _containers.RepeatedScalarFieldContainer[Scheduler]
    nodes_per_leaf: int
    nvlink_label: str
    pack_label: str
    volcano_nvlink_tier: int
    max_wait: str
    def __init__(self, sizes: _Optional[_Union[ParallelSizes, _Mapping]] = ..., order: _Optional[str] = ..., cluster: _Optional[_Union[Cluster, _Mapping]] = ..., nvlink_domain_size: _Optional[int] = ..., gpus_per_node: _Optional[int] = ..., within: _Optional[_Iterable[_Union[Constraint, _Mapping]]] = ..., schedulers: _Optional[_Iterable[_Union[Scheduler, str]]] = ..., nodes_per_leaf: _Optional[int] = ..., nvlink_label: _Optional[str] = ..., pack_label: _Optional[str] = ..., volcano_nvlink_tier: _Optional[int] = ..., max_wait: _Optional[str] = ...) -> None: ...

class SchedulerRequest(_message.Message):
    __slots__ = ("scheduler", "options", "annotations", "spec", "why")
    class AnnotationsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SCHEDULER_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    ANNOTATIONS_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    WHY_FIELD_NUMBER: _ClassVar[int]
    scheduler: Scheduler
    options: _containers.RepeatedScalarFieldContainer[str]
    annotations: _containers.ScalarMap[str, str]
    spec: Value
    why: str
    def __init__(self, scheduler: _Optional[_Union[Scheduler, str]] = ..., options: _Optional[_Iterable[str]] = ..., annotations: _Optional[_Mapping[str, str]] = ..., spec: _Optional[_Union[Value, _Mapping]] = ..., why: _Optional[str] = ...) -> None: ...

class RecommendAllocationResponse(_message.Message):
    __slots__ = ("world_size", "order", "gpus_per_node", "nodes", "nvlink_domain_gpus", "nodes_per_domain", "within", "unit_ranks", "unit_nodes", "segment_nodes", "min_segment_nodes", "requests")
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    ORDER_FIELD_NUMBER: _ClassVar[int]
    GPUS_PER_NODE_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    NVLINK_DOMAIN_GPUS_FIELD_NUMBER: _ClassVar[int]
    NODES_PER_DOMAIN_FIELD_NUMBER: _ClassVar[int]
    WITHIN_FIELD_NUMBER: _ClassVar[int]
    UNIT_RANKS_FIELD_NUMBER: _ClassVar[int]
    UNIT_NODES_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_NODES_FIELD_NUMBER: _ClassVar[int]
    MIN_SEGMENT_NODES_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    world_size: int
    order: str
    gpus_per_node: int
    nodes: int
    nvlink_domain_gpus: int
    nodes_per_domain: int
    within: _containers.RepeatedCompositeFieldContainer[Constraint]
    unit_ranks: int
    unit_nodes: int
    segment_nodes: int
    min_segment_nodes: int
    requests: _containers.RepeatedCompositeFieldContainer[SchedulerRequest]
    def __init__(self, world_size: _Optional[int] = ..., order: _Optional[str] = ..., gpus_per_node: _Optional[int] = ..., nodes: _Optional[int] = ..., nvlink_domain_gpus: _Optional[int] = ..., nodes_per_domain: _Optional[int] = ..., within: _Optional[_Iterable[_Union[Constraint, _Mapping]]] = ..., unit_ranks: _Optional[int] = ..., unit_nodes: _Optional[int] = ..., segment_nodes: _Optional[int] = ..., min_segment_nodes: _Optional[int] = ..., requests: _Optional[_Iterable[_Union[SchedulerRequest, _Mapping]]] = ...) -> None: ...

class HostList(_message.Message):
    __slots__ = ("hosts",)
    HOSTS_FIELD_NUMBER: _ClassVar[int]
    hosts: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, hosts: _Optional[_Iterable[str]] = ...) -> None: ...

class RepairRequest(_message.Message):
    __slots__ = ("job", "running_order", "running_assignment", "failed_hosts", "failed_gpus", "spare_hosts", "max_moves")
    JOB_FIELD_NUMBER: _ClassVar[int]
    RUNNING_ORDER_FIELD_NUMBER: _ClassVar[int]
    RUNNING_ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    FAILED_HOSTS_FIELD_NUMBER: _ClassVar[int]
    FAILED_GPUS_FIELD_NUMBER: _ClassVar[int]
    SPARE_HOSTS_FIELD_NUMBER: _ClassVar[int]
    MAX_MOVES_FIELD_NUMBER: _ClassVar[int]
    job: SolveRequest
    running_order: str
    running_assignment: _containers.RepeatedScalarFieldContainer[str]
    failed_hosts: _containers.RepeatedScalarFieldContainer[str]
    failed_gpus: _containers.RepeatedScalarFieldContainer[str]
    spare_hosts: HostList
    max_moves: int
    def __init__(self, job: _Optional[_Union[SolveRequest, _Mapping]] = ..., running_order: _Optional[str] = ..., running_assignment: _Optional[_Iterable[str]] = ..., failed_hosts: _Optional[_Iterable[str]] = ..., failed_gpus: _Optional[_Iterable[str]] = ..., spare_hosts: _Optional[_Union[HostList, _Mapping]] = ..., max_moves: _Optional[int] = ...) -> None: ...

class RepairOption(_message.Message):
    __slots__ = ("kind", "order", "assignment", "cost", "ranks_moved", "hosts_removed", "hosts_added", "hosts", "apply", "stopped_by", "config")
    KIND_FIELD_NUMBER: _ClassVar[int]
    ORDER_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    COST_FIELD_NUMBER: _ClassVar[int]
    RANKS_MOVED_FIELD_NUMBER: _ClassVar[int]
    HOSTS_REMOVED_FIELD_NUMBER: _ClassVar[int]
    HOSTS_ADDED_FIELD_NUMBER: _ClassVar[int]
    HOSTS_FIELD_NUMBER: _ClassVar[int]
    APPLY_FIELD_NUMBER: _ClassVar[int]
    STOPPED_BY_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    kind: str
    order: str
    assignment: _containers.RepeatedScalarFieldContainer[str]
    cost: Cost
    ranks_moved: int
    hosts_removed: _containers.RepeatedScalarFieldContainer[str]
    hosts_added: _containers.RepeatedScalarFieldContainer[str]
    hosts: _containers.RepeatedCompositeFieldContainer[HostPlacement]
    apply: ApplyInfo
    stopped_by: str
    config: ParallelConfig
    def __init__(self, kind: _Optional[str] = ..., order: _Optional[str] = ..., assignment: _Optional[_Iterable[str]] = ..., cost: _Optional[_Union[Cost, _Mapping]] = ..., ranks_moved: _Optional[int] = ..., hosts_removed: _Optional[_Iterable[str]] = ..., hosts_added: _Optional[_Iterable[str]] = ..., hosts: _Optional[_Iterable[_Union[HostPlacement, _Mapping]]] = ..., apply: _Optional[_Union[ApplyInfo, _Mapping]] = ..., stopped_by: _Optional[str] = ..., config: _Optional[_Union[ParallelConfig, _Mapping]] = ...) -> None: ...

class RepairResponse(_message.Message):
    __slots__ = ("options", "recommended", "unavailable", "failed_hosts", "spare_hosts")
    class UnavailableEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    RECOMMENDED_FIELD_NUMBER: _ClassVar[int]
    UNAVAILABLE_FIELD_NUMBER: _ClassVar[int]
    FAILED_HOSTS_FIELD_NUMBER: _ClassVar[int]
    SPARE_HOSTS_FIELD_NUMBER: _ClassVar[int]
    options: _containers.RepeatedCompositeFieldContainer[RepairOption]
    recommended: str
    unavailable: _containers.ScalarMap[str, str]
    failed_hosts: _containers.RepeatedScalarFieldContainer[str]
    spare_hosts: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, options: _Optional[_Iterable[_Union[RepairOption, _Mapping]]] = ..., recommended: _Optional[str] = ..., unavailable: _Optional[_Mapping[str, str]] = ..., failed_hosts: _Optional[_Iterable[str]] = ..., spare_hosts: _Optional[_Iterable[str]] = ...) -> None: ...

class CompareRequest(_message.Message):
    __slots__ = ("job", "allocations")
    JOB_FIELD_NUMBER: _ClassVar[int]
    ALLOCATIONS_FIELD_NUMBER: _ClassVar[int]
    job: SolveRequest
    allocations: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, job: _Optional[_Union[SolveRequest, _Mapping]] = ..., allocations: _Optional[_Iterable[str]] = ...) -> None: ...

class AllocationDifference(_message.Message):
    __slots__ = ("seconds", "traffic_class", "class_seconds", "best_class_seconds", "link", "bottleneck", "best_bottleneck")
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    TRAFFIC_CLASS_FIELD_NUMBER: _ClassVar[int]
    CLASS_SECONDS_FIELD_NUMBER: _ClassVar[int]
    BEST_CLASS_SECONDS_FIELD_NUMBER: _ClassVar[int]
    LINK_FIELD_NUMBER: _ClassVar[int]
    BOTTLENECK_FIELD_NUMBER: _ClassVar[int]
    BEST_BOTTLENECK_FIELD_NUMBER: _ClassVar[int]
    seconds: float
    traffic_class: str
    class_seconds: float
    best_class_seconds: float
    link: _containers.RepeatedScalarFieldContainer[str]
    bottleneck: str
    best_bottleneck: str
    def __init__(self, seconds: _Optional[float] = ..., traffic_class: _Optional[str] = ..., class_seconds: _Optional[float] = ..., best_class_seconds: _Optional[float] = ..., link: _Optional[_Iterable[str]] = ..., bottleneck: _Optional[str] = ..., best_bottleneck: _Optional[str] = ...) -> None: ...

class ComparedAllocation(_message.Message):
    __slots__ = ("rank", "index", "allocation", "hosts", "result", "difference")
    RANK_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_FIELD_NUMBER: _ClassVar[int]
    HOSTS_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    DIFFERENCE_FIELD_NUMBER: _ClassVar[int]
    rank: int
    index: int
    allocation: str
    hosts: _containers.RepeatedScalarFieldContainer[str]
    result: SolveResponse
    difference: AllocationDifference
    def __init__(self, rank: _Optional[int] = ..., index: _Optional[int] = ..., allocation: _Optional[str] = ..., hosts: _Optional[_Iterable[str]] = ..., result: _Optional[_Union[SolveResponse, _Mapping]] = ..., difference: _Optional[_Union[AllocationDifference, _Mapping]] = ...) -> None: ...

class CompareResponse(_message.Message):
    __slots__ = ("world_size", "allocations")
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    ALLOCATIONS_FIELD_NUMBER: _ClassVar[int]
    world_size: int
    allocations: _containers.RepeatedCompositeFieldContainer[ComparedAllocation]
    def __init__(self, world_size: _Optional[int] = ..., allocations: _Optional[_Iterable[_Union[ComparedAllocation, _Mapping]]] = ...) -> None: ...
