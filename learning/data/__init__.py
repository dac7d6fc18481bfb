"""Data: datasets held in memory, the file loaders, and partitions of a training pool into clients.

* ``_datasets``  :class:`Dataset`, :class:`DataSplits`, the registry and the datasets that need no files
                 (``digits``, ``synthetic``, ``gmm``, ``mini_femnist``), validation and public splits;
* ``_files``     loaders of local files (MNIST, Fashion-MNIST, EMNIST, CIFAR-10 binary, LEAF JSON); never the network;
* ``_local``     a member's own data from local files (npz, csv, image folders, IDX, CIFAR-10, LEAF, hf-disk), the
                 data contract the genesis fixes (shape, classes, dtype, preprocessing), writers and digests;
* ``_partition`` partitioners (IID, Dirichlet(α), k classes, pairs, shards, natural, log-normal).

A new dataset: a frozen spec with ``load() -> DataSplits``, decorated with ``@register_dataset("name")``; a new
partitioner: a frozen spec called as ``spec(dataset, rng=...) -> Partition``, with ``@register_partition("name")``.
"""

from learning.data._datasets import (
    DATASETS, DataConfig, DataSplits, Dataset, DatasetSpec, DigitsSpec, GMMSpec, MiniFEMNISTSpec, SyntheticSpec,
    dataset_spec, load_data, register_dataset, split_public, split_random, with_public, with_validation,
)
from learning.data._files import (
    CIFAR10Spec, EMNISTSpec, FEMNISTSpec, FashionMNISTSpec, LEAF_LETTERS, MNISTSpec, Sent140Spec, ShakespeareSpec,
    decode_idx, read_cifar10_binary, read_idx,
)
from learning.data._local import (
    LOCAL_FORMATS, DataContract, LocalData, LocalDataError, Preprocessing, dir_digest, load_local, write_local,
)
from learning.data._partition import (
    DirichletPartition, IIDPartition, KClassesPartition, LogNormalPartition, NaturalPartition, PARTITIONS,
    PairsPartition, Partition, PartitionSpec, PartitionStats, ShardsPartition, partition_dataset, partition_spec,
    register_partition,
)

__all__ = [
    "CIFAR10Spec", "DATASETS", "DataConfig", "DataContract", "LOCAL_FORMATS", "LocalData", "LocalDataError",
    "Preprocessing", "dir_digest", "load_local", "write_local", "DataSplits", "Dataset", "DatasetSpec", "DigitsSpec",
    "DirichletPartition", "EMNISTSpec", "FEMNISTSpec", "FashionMNISTSpec", "GMMSpec", "IIDPartition",
    "KClassesPartition", "LEAF_LETTERS", "LogNormalPartition", "MNISTSpec", "MiniFEMNISTSpec", "NaturalPartition",
    "PARTITIONS", "PairsPartition", "Partition", "PartitionSpec", "PartitionStats", "Sent140Spec",
    "ShakespeareSpec", "ShardsPartition", "SyntheticSpec", "dataset_spec", "decode_idx", "load_data",
    "partition_dataset", "partition_spec", "read_cifar10_binary", "read_idx", "register_dataset",
    "register_partition", "split_public", "split_random", "with_public", "with_validation",
]
