"""CANN operator names that the Ascend readers and the diff need, each entry with its source.

Source of every entry: CANN's operator prototype headers (``REG_OP(<type>)``, the registry of the op
types CANN's graph engine knows) as published in https://github.com/mindspore-ai/graphengine at commit
``cd75e1497d16a4dc8545d544d12765ad141d78cf``, folder ``910/third_party/fwkacllib/inc/ops/``; the file
named per entry is the header in that folder.

* :data:`DIGIT_OP_TYPES`: every registered op type whose name ends in a digit (``MatMulV2``, ``Expm1``,
  ``Atan2``, …: all 172 of that commit). A Level0 export names single (aclop) ops as the type plus an
  instance counter (``Conv2D1``, ``MatMulV21``); the counter is removed, the type's own digits kept.
* :data:`OP_TYPES_BY_HEADER`: every registered op type (1600), to find the op inside GE's names of
  ops it split from another (``AdaptiveAvgPool2d24LeftBatchMatMulV2`` is a ``BatchMatMulV2``).
* :data:`OP_ALIASES`: op types whose header says they are deprecated in favour of another
  (``REG_OP(ReduceSumD)``: "THIS FUNCTION IS DEPRECATED. Please use ReduceSum instead."), which is the
  same operator: Level1 exports often name the graph's ``…D`` form (``ReduceSumD``, ``TopKD``) where
  Level0 and aclnn name the other (``ReduceSum``, ``TopKV2``). Alias → (operator, header).
"""

from __future__ import annotations

import re

DIGIT_OP_TYPES: dict[str, str] = {
    "AccumulateNV2": "elewise_calculation_ops.h",
    "AddV2": "elewise_calculation_ops.h",
    "AdjustBrightnessV2": "image.h",
    "AdjustSaturationV2": "image.h",
    "AngleV2": "math_ops.h",
    "ApplyAdagradV2": "nn_training_ops.h",
    "ApplyAdamV2": "elewise_calculation_ops.h",
    "ApplyAdamWithAmsgradV2": "nn_training_ops.h",
    "ApplyCamePart1": "nn_optimizer.h",
    "ApplyCamePart2": "nn_optimizer.h",
    "ApplyCamePart3": "nn_optimizer.h",
    "ApplyCamePart4": "nn_optimizer.h",
    "ApplyFtrlV2": "nn_training_ops.h",
    "ArgMaxV2": "elewise_calculation_ops.h",
    "AscendAntiQuantV2": "quantize_ops.h",
    "AscendDequantS16": "quantize_ops.h",
    "AscendQuantV2": "quantize_ops.h",
    "AscendRequantS16": "quantize_ops.h",
    "Atan2": "elewise_calculation_ops.h",
    "AvgPoolV2": "nn_pooling_ops.h",
    "AxpyV2": "elewise_calculation_ops.h",
    "BNTrainingUpdateV2": "reduce_ops.h",
    "BNTrainingUpdateV3": "reduce_ops.h",
    "BatchMatMulV2": "matrix_calculation_ops.h",
    "BatchNormExt2": "nn_batch_norm_ops.h",
    "BatchNormGradExt2": "nn_batch_norm_ops.h",
    "CTCLossV2": "ctc_ops.h",
    "CeluV2": "nonlinear_fuc_ops.h",
    "ClipByValueV2": "elewise_calculation_ops.h",
    "Col2ImV2": "transformation_ops.h",
    "ConcatV2": "split_combination_ops.h",
    "CropAndResizeV2": "image_ops.h",
    "DecodeBase64": "string_ops.h",
    "DecodeBboxV2": "nn_detect_ops.h",
    "DecodeCornerpointsTargetWrtCenterV1": "nn_detect_ops.h",
    "DiagV2": "pad_ops.h",
    "DrawBoundingBoxesV2": "image_ops.h",
    "DropOutDoMaskV3": "nn_norm_ops.h",
    "DropOutGenMaskV3": "random_ops.h",
    "DropOutGenMaskV4": "random_ops.h",
    "DropoutV2": "random_ops.h",
    "DynamicGRUV2": "rnn.h",
    "DynamicGetNextV2": "data_flow_ops.h",
    "DynamicLSTMV2": "rnn.h",
    "DynamicQuantV2": "nn_quantize.h",
    "DynamicRNNV2": "rnn.h",
    "DynamicRNNV3": "rnn.h",
    "EluGradV2": "nonlinear_fuc_ops.h",
    "EmbeddingFeatureMappingV2": "nn_other.h",
    "EncodeBase64": "string_ops.h",
    "Expm1": "elewise_calculation_ops.h",
    "ExtractGlimpseV2": "image_ops.h",
    "FastGeluV2": "nonlinear_fuc_ops.h",
    "FillV2": "pad_ops.h",
    "FlattenV2": "transformation_ops.h",
    "FusedBatchNormV2": "nn_ops.h",
    "GatherV2": "selection_ops.h",
    "GeGluGradV2": "fusion_ops.h",
    "GeGluV2": "fusion_ops.h",
    "GetNextV2": "data_flow_ops.h",
    "GroupNormV2": "nn_norm.h",
    "HistogramV2": "math_ops.h",
    "INInferV2": "reduce_ops.h",
    "INTrainingReduceV2": "reduce_ops.h",
    "INTrainingUpdateV2": "reduce_ops.h",
    "ImageProjectiveTransformV2": "image_ops.h",
    "InTopKV2": "nn_ops.h",
    "InstanceNormV2": "nn_norm_ops.h",
    "IteratorV2": "get_data_ops.h",
    "KLDivV2": "elewise_calculation_ops.h",
    "LRUCacheV2": "data_flow_ops.h",
    "LambUpdateWithLrV2": "elewise_calculation_ops.h",
    "LarsV2": "nn_training_ops.h",
    "LayerNormBetaGammaBackpropV2": "nn_norm_ops.h",
    "LayerNormGradV3": "nn_norm_ops.h",
    "LayerNormV3": "nn_norm_ops.h",
    "LayerNormV4": "nn_norm_ops.h",
    "LayerNormXBackpropV2": "nn_norm_ops.h",
    "LayerNormXBackpropV3": "nn_norm_ops.h",
    "LogSoftmaxV2": "nn_norm_ops.h",
    "LpNormReduceV2": "math_ops.h",
    "LpNormUpdateV2": "math_ops.h",
    "LpNormV2": "math_ops.h",
    "MVNV2": "nn_norm_ops.h",
    "MaskedSelectV2": "selection_ops.h",
    "MatMulV2": "matrix_calculation_ops.h",
    "MatrixDiagPartV2": "matrix_calculation_ops.h",
    "MatrixDiagPartV3": "matrix_calculation_ops.h",
    "MatrixDiagV2": "matrix_calculation_ops.h",
    "MatrixDiagV3": "matrix_calculation_ops.h",
    "MatrixSetDiagV2": "matrix_calculation_ops.h",
    "MatrixSetDiagV3": "matrix_calculation_ops.h",
    "MaxPoolExt2": "nn_pooling_ops.h",
    "MaxPoolGradWithArgmaxV1": "nn_pooling_ops.h",
    "MaxPoolGradWithArgmaxV2": "nn_pooling_ops.h",
    "MaxPoolV2": "nn_pooling_ops.h",
    "MaxPoolV3": "nn_pooling_ops.h",
    "MaxPoolWithArgmaxV1": "nn_pooling_ops.h",
    "MaxPoolWithArgmaxV2": "nn_pooling_ops.h",
    "MoeInitRoutingV2": "fusion_ops.h",
    "NPUClearFloatStatusV2": "npu_loss_scale_ops.h",
    "NPUGetFloatStatusV2": "npu_loss_scale_ops.h",
    "NonMaxSuppressionV2": "image_ops.h",
    "NonMaxSuppressionV3": "image_ops.h",
    "NonMaxSuppressionV4": "image_ops.h",
    "NonMaxSuppressionV5": "image_ops.h",
    "NonMaxSuppressionV6": "nn_detect_ops.h",
    "NonMaxSuppressionV7": "nn_detect_ops.h",
    "NonZeroWithValueShapeV2": "array_ops.h",
    "NormalizeV2": "image_ops.h",
    "OutfeedEnqueueOpV2": "data_flow_ops.h",
    "PSROIPoolingV2": "nn_detect_ops.h",
    "PadV2": "pad_ops.h",
    "PadV3": "pad_ops.h",
    "PrintV2": "logging_ops.h",
    "PrintV3": "logging_ops.h",
    "PriorBoxDV2": "nn_detect_ops.h",
    "QuantBatchMatmulV3": "matrix_calculation_ops.h",
    "Relu6": "nonlinear_fuc_ops.h",
    "ReluGradV2": "nonlinear_fuc_ops.h",
    "ReluV2": "nonlinear_fuc_ops.h",
    "ResizeBilinearV2": "image_ops.h",
    "ResizeNearestNeighborV2": "image_ops.h",
    "ResizeV2": "image.h",
    "ReverseV2": "selection_ops.h",
    "RngReadAndSkipV2": "stateful_random_ops.h",
    "RnnGenMaskV2": "rnn.h",
    "RollV2": "nn_norm_ops.h",
    "SampleDistortedBoundingBoxExt2": "image_ops.h",
    "ScatterElementsV2": "matrix_calculation_ops.h",
    "SdcaOptimizerV2": "sdca_ops.h",
    "SelectV2": "selection_ops.h",
    "SigmoidCrossEntropyWithLogitsGradV2": "nn_norm_ops.h",
    "SigmoidCrossEntropyWithLogitsV2": "nn_norm_ops.h",
    "SliceDV2": "selection_ops.h",
    "SmoothL1LossGradV2": "nn_norm_ops.h",
    "SmoothL1LossV2": "nn_norm_ops.h",
    "SoftmaxV2": "nn_norm_ops.h",
    "SoftplusV2": "nonlinear_fuc_ops.h",
    "SortV2": "array_ops.h",
    "SparseApplyAdagradV2": "nn_training_ops.h",
    "SparseApplyFtrlV2": "nn_training_ops.h",
    "SquareSumV1": "elewise_calculation_ops.h",
    "SquareSumV2": "elewise_calculation_ops.h",
    "SqueezeV2": "array_ops.h",
    "SqueezeV3": "array_ops.h",
    "StatefulStandardNormalV2": "stateful_random_ops.h",
    "StatelessBernoulliV2": "random_ops.h",
    "StatelessRandomGammaV2": "stateless_random_ops.h",
    "StatelessRandomNormalV2": "stateless_random_ops.h",
    "StatelessRandomUniformFullIntV2": "stateless_random_ops.h",
    "StatelessRandomUniformIntV2": "stateless_random_ops.h",
    "StatelessRandomUniformV2": "stateless_random_ops.h",
    "StatelessTruncatedNormalV2": "stateless_random_ops.h",
    "StridedSliceAssignV2": "selection_ops.h",
    "StridedSliceV2": "selection_ops.h",
    "StridedSliceV3": "selection_ops.h",
    "StringSplitV2": "string_ops.h",
    "SyncResizeBilinearV2": "image_ops.h",
    "TensorListConcatV2": "list_ops.h",
    "TensorListScatterV2": "list_ops.h",
    "ThresholdV2": "nonlinear_fuc_ops.h",
    "TopKPQDistanceV2": "vector_search.h",
    "TopKV2": "selection_ops.h",
    "TransQuantParamV2": "nn_quantize.h",
    "UniqueExt2": "array_ops.h",
    "UniqueWithCountsExt2": "array_ops.h",
    "UnsqueezeV2": "array_ops.h",
    "UnsqueezeV3": "array_ops.h",
    "WarpAffineV2": "image.h",
    "WeightQuantBatchMatmulV2": "fusion_ops.h",
    "YoloV3DetectionOutputV2": "nn_detect_ops.h",
}
"""Op type ending in a digit → the header (in the source folder above) that registers it."""

OP_ALIASES: dict[str, tuple[str, str]] = {
    "ApplyAdaMaxD": ("ApplyAdaMax", "nn_training_ops.h"),
    "ApplyAdadeltaD": ("ApplyAdadelta", "nn_training_ops.h"),
    "ApplyAdagradD": ("ApplyAdagrad", "nn_training_ops.h"),
    "ApplyAdagradDAD": ("ApplyAdagradDA", "nn_training_ops.h"),
    "ApplyAdagradV2D": ("ApplyAdagradV2", "nn_training_ops.h"),
    "ApplyAdamD": ("ApplyAdam", "nn_training_ops.h"),
    "ApplyAdamWithAmsgradD": ("ApplyAdamWithAmsgrad", "nn_training_ops.h"),
    "ApplyAddSignD": ("ApplyAddSign", "nn_training_ops.h"),
    "ApplyCenteredRMSPropD": ("ApplyCenteredRMSProp", "nn_training_ops.h"),
    "ApplyFtrlD": ("ApplyFtrl", "nn_training_ops.h"),
    "ApplyFtrlV2D": ("ApplyFtrlV2", "nn_training_ops.h"),
    "ApplyKerasMomentumD": ("ApplyKerasMomentum", "nn_training_ops.h"),
    "ApplyMomentumD": ("ApplyMomentum", "nn_training_ops.h"),
    "ApplyPowerSignD": ("ApplyPowerSign", "nn_training_ops.h"),
    "ApplyProximalAdagradD": ("ApplyProximalAdagrad", "nn_training_ops.h"),
    "ApplyRMSPropD": ("ApplyRMSProp", "nn_training_ops.h"),
    "ArgMinD": ("ArgMin", "elewise_calculation_ops.h"),
    "AvgPool1DD": ("AvgPool1D", "nn_pooling_ops.h"),
    "AvgPoolGradD": ("AvgPoolGrad", "nn_pooling_ops.h"),
    "BNInferenceD": ("BNInference", "nn_batch_norm_ops.h"),
    "BatchToSpaceD": ("BatchToSpace", "transformation_ops.h"),
    "BatchToSpaceNDD": ("BatchToSpaceND", "transformation_ops.h"),
    "BroadcastToD": ("BroadcastTo", "pad_ops.h"),
    "ConcatD": ("Concat", "split_combination_ops.h"),
    "ConcatOffsetD": ("ConcatOffset", "split_combination_ops.h"),
    "ConcatV2D": ("ConcatV2", "split_combination_ops.h"),
    "ConfusionTransposeD": ("ConfusionTranspose", "transformation_ops.h"),
    "Conv2DBackpropFilterD": ("Conv2DBackpropFilter", "nn_calculation_ops.h"),
    "Conv2DBackpropInputD": ("Conv2DBackpropInput", "nn_calculation_ops.h"),
    "Conv2DTransposeD": ("Conv2DTranspose", "nn_calculation_ops.h"),
    "Conv3DBackpropFilterD": ("Conv3DBackpropFilter", "nn_calculation_ops.h"),
    "Conv3DBackpropInputD": ("Conv3DBackpropInput", "nn_calculation_ops.h"),
    "Conv3DTransposeD": ("Conv3DTranspose", "nn_calculation_ops.h"),
    "CropAndResizeD": ("CropAndResize", "image_ops.h"),
    "CumprodD": ("Cumprod", "selection_ops.h"),
    "CumsumD": ("Cumsum", "selection_ops.h"),
    "DiagD": ("Diag", "pad_ops.h"),
    "DiagPartD": ("DiagPart", "matrix_calculation_ops.h"),
    "EuclideanNormD": ("EuclideanNorm", "reduce_ops.h"),
    "FillD": ("Fill", "pad_ops.h"),
    "GatherV2D": ("GatherV2", "selection_ops.h"),
    "HistogramFixedWidthD": ("HistogramFixedWidth", "math_ops.h"),
    "INInferV2D": ("INInferV2", "nn_norm_ops.h"),
    "InTopKD": ("InTopK", "selection_ops.h"),
    "InplaceAddD": ("InplaceAdd", "selection_ops.h"),
    "InplaceSubD": ("InplaceSub", "selection_ops.h"),
    "InplaceUpdateD": ("InplaceUpdate", "selection_ops.h"),
    "LinSpaceD": ("LinSpace", "random_ops.h"),
    "MatrixDiagD": ("MatrixDiag", "matrix_calculation_ops.h"),
    "MatrixDiagPartD": ("MatrixDiagPart", "matrix_calculation_ops.h"),
    "MatrixSetDiagD": ("MatrixSetDiag", "matrix_calculation_ops.h"),
    "OneHotD": ("OneHot", "selection_ops.h"),
    "PadD": ("Pad", "pad_ops.h"),
    "PadV3D": ("PadV3", "pad_ops.h"),
    "PriorBoxD": ("PriorBox", "nn_detect_ops.h"),
    "PriorBoxDV2": ("PriorBox", "nn_detect_ops.h"),
    "ProposalD": ("Proposal", "selection_ops.h"),
    "PtIou": ("Iou", "nn_detect_ops.h"),
    "RangeD": ("Range", "selection_ops.h"),
    "ReduceAllD": ("ReduceAll", "reduce_ops.h"),
    "ReduceAnyD": ("ReduceAny", "reduce_ops.h"),
    "ReduceMaxD": ("ReduceMax", "reduce_ops.h"),
    "ReduceMeanD": ("ReduceMean", "reduce_ops.h"),
    "ReduceMinD": ("ReduceMin", "reduce_ops.h"),
    "ReduceProdD": ("ReduceProd", "reduce_ops.h"),
    "ReduceSumD": ("ReduceSum", "reduce_ops.h"),
    "Relu6D": ("Relu6", "nonlinear_fuc_ops.h"),
    "ResizeBilinearV2D": ("ResizeBilinearV2", "image_ops.h"),
    "ResizeNearestNeighborV2D": ("ResizeNearestNeighborV2", "image_ops.h"),
    "ResizeNearestNeighborV2GradD": ("ResizeNearestNeighborV2Grad", "image_ops.h"),
    "ReverseV2D": ("ReverseV2", "selection_ops.h"),
    "RpnProposalsD": ("RpnProposals", "nn_detect_ops.h"),
    "ScatterNdD": ("ScatterNd", "selection_ops.h"),
    "SegmentMaxD": ("SegmentMax", "selection_ops.h"),
    "SliceD": ("Slice", "selection_ops.h"),
    "SliceDV2": ("Slice", "selection_ops.h"),
    "SpaceToBatchD": ("SpaceToBatch", "transformation_ops.h"),
    "SpaceToBatchNDD": ("SpaceToBatchND", "transformation_ops.h"),
    "SparseApplyAdadeltaD": ("SparseApplyAdadelta", "nn_training_ops.h"),
    "SparseApplyAdagradD": ("SparseApplyAdagrad", "nn_training_ops.h"),
    "SparseApplyAdagradV2D": ("SparseApplyAdagradV2", "nn_training_ops.h"),
    "SparseApplyFtrlD": ("SparseApplyFtrl", "nn_training_ops.h"),
    "SparseApplyFtrlV2D": ("SparseApplyFtrlV2", "nn_training_ops.h"),
    "SparseApplyProximalAdagradD": ("SparseApplyProximalAdagrad", "nn_training_ops.h"),
    "SparseApplyRMSPropD": ("SparseApplyRMSProp", "nn_training_ops.h"),
    "SplitD": ("Split", "split_combination_ops.h"),
    "SplitVD": ("SplitV", "split_combination_ops.h"),
    "SqueezeV2": ("Squeeze", "array_ops.h"),
    "StridedSliceAssignD": ("StridedSliceAssign", "selection_ops.h"),
    "StridedSliceD": ("StridedSlice", "selection_ops.h"),
    "StridedSliceGradD": ("StridedSliceGrad", "selection_ops.h"),
    "TileD": ("Tile", "selection_ops.h"),
    "TopKD": ("TopKV2", "selection_ops.h"),
    "TransposeD": ("Transpose", "transformation_ops.h"),
    "UnsortedSegmentMaxD": ("UnsortedSegmentMax", "selection_ops.h"),
    "UnsortedSegmentProdD": ("UnsortedSegmentProd", "selection_ops.h"),
    "UnsqueezeV2": ("Unsqueeze", "array_ops.h"),
    "YoloV2DetectionOutputD": ("YoloV2DetectionOutput", "nn_detect_ops.h"),
    "YoloV3DetectionOutputD": ("YoloV3DetectionOutput", "nn_detect_ops.h"),
}
"""Deprecated op type → (the op type it stands for, the header that says so)."""


NAME_PREFIX_TYPES: dict[str, tuple[str, str]] = {
    "atomic_memset": (
        "MemSet",
        "Ascend/msinsight@c1e639ee2 test/data/pytorch/db/level1/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/"
        "ascend_pytorch_profiler_0.db: COMPUTE_TASK_INFO names atomic_memset-1_271 … with opType MemSet",
    ),
}
"""Kernel-name prefix → (op type, where the profiler itself types that name): GE's atomic-clean
kernels, which a Level0 export names ``atomic_memset-1_<n>`` and Level1 types ``MemSet``."""


OP_TYPES_BY_HEADER: dict[str, str] = {
    "aipp.h": "Aipp AippData",
    "arithmetic.h": "LogAddExp",
    "array.h": "ConstPlaceHolder",
    "array_ops.h": (
        "BroadcastArgs BroadcastGradientArgs CheckNumerics Const Constant Copy Data EditDistance Empty "
        "End EnsureShape Expand ExpandD ExpandDims FileConstant Fingerprint GatherShapes GetShape "
        "GuaranteeConst Identity IdentityN InvertPermutation ListDiff LowerBound MatrixBandPart MirrorPad "
        "MirrorPadGrad NonZero NonZeroWithValue NonZeroWithValueShape NonZeroWithValueShapeV2 PlaceHolder "
        "PlaceholderWithDefault PreventGradient QueueData RaggedTensorFromVariant Rank ReadVariableOp "
        "RefData Reshape ReverseSequence Shape ShapeN Size Snapshot SortV2 Squeeze SqueezeV2 SqueezeV3 "
        "StopGradient Summary TransShape Unique UniqueConsecutive UniqueExt2 UniqueWithCounts "
        "UniqueWithCountsAndSorting UniqueWithCountsExt2 UnravelIndex Unsqueeze UnsqueezeV2 UnsqueezeV3 "
        "UpdateTensorDesc UpperBound ViewCopy Where _ParallelConcatStart"
    ),
    "audio_ops.h": "AudioSpectrogram DecodeWav EncodeWav Mfcc",
    "avg_pool_1d_ops.h": "AvgPool1DAvgMatrix",
    "batch_ops.h": "Batch Unbatch UnbatchGrad",
    "bitwise_ops.h": "LeftShift RightShift",
    "boosted_trees_ops.h": "BoostedTreesBucketize",
    "candidate_sampling_ops.h": (
        "AllCandidateSampler ComputeAccidentalHits FixedUnigramCandidateSampler "
        "LearnedUnigramCandidateSampler LogUniformCandidateSampler ThreadUnsafeUnigramCandidateSampler "
        "UniformCandidateSampler"
    ),
    "cast.h": "AdaCast",
    "cluster.h": "KMeansCentroids",
    "condtake_ops.h": "CondTake",
    "control_flow_ops.h": (
        "ControlTrigger Enter Exit LoopCond MapIndex Merge NextIteration RefEnter RefExit RefMerge "
        "RefNextIteration RefSwitch Switch SwitchN"
    ),
    "correlation.h": "Correlation",
    "ctc_ops.h": "CTCBeamSearchDecoder CTCGreedyDecoder CTCLoss CTCLossV2 CTCLossV2Grad",
    "data_flow_ops.h": (
        "AccumulatorApplyGradient AccumulatorNumAccumulated AccumulatorSetGlobalStep "
        "AccumulatorTakeGradient AdpGetNext Barrier BarrierClose BarrierIncompleteSize BarrierInsertMany "
        "BarrierReadySize BarrierTakeMany CacheAdd CacheAllIndexToLocal CacheRemoteIndexToLocal "
        "ConcatFromSequence ConditionalAccumulator DynamicGetNext DynamicGetNextV2 DynamicPartition "
        "DynamicStitch FIFOQueue FakeQueue FlowFunc GetNextFromQueue GetNextV2 LRUCacheV2 LruCache "
        "MapClear MapIncompleteSize MapPeek MapSize MapStage MapUnstage MapUnstageNoKey OptionalGetValue "
        "OrderedMapClear OrderedMapIncompleteSize OrderedMapPeek OrderedMapSize OrderedMapStage "
        "OrderedMapUnstage OrderedMapUnstageNoKey OutfeedEnqueueOp OutfeedEnqueueOpV2 PaddingFIFOQueue "
        "ParallelDynamicStitch PeekData PriorityQueue QueueClose QueueDequeue QueueDequeueMany "
        "QueueDequeueUpTo QueueEnqueue QueueEnqueueMany QueueIsClosed QueueSize RandomShuffleQueue "
        "RecordInput ResourceAccumulatorApplyGradient ResourceAccumulatorNumAccumulated "
        "ResourceAccumulatorSetGlobalStep ResourceAccumulatorTakeGradient ResourceConditionalAccumulator "
        "SequenceAt SequenceConstruct SequenceEmpty SequenceErase SequenceInsert SequenceLength "
        "SparseAccumulatorApplyGradient SparseAccumulatorTakeGradient SparseConditionalAccumulator "
        "SplitToSequence Stack StackClose StackPop StackPush Stage StageClear StagePeek StageSize "
        "TensorArray TensorArrayClose TensorArrayConcat TensorArrayGather TensorArrayGrad "
        "TensorArrayGradWithShape TensorArrayRead TensorArrayScatter TensorArraySize TensorArraySplit "
        "TensorArrayWrite Unstage"
    ),
    "deep_md.h": (
        "ProdEnvMatA ProdEnvMatACalcDescrpt ProdEnvMatACalcRij ProdForceSeA ProdVirialSeA TabulateFusion "
        "TabulateFusionGrad"
    ),
    "elewise_calculation_ops.h": (
        "Abs AbsGrad AccumulateNV2 Acos AcosGrad Acosh AcoshGrad AdamApplyOne AdamApplyOneAssign "
        "AdamApplyOneWithDecay AdamApplyOneWithDecayAssign Add AddMatMatElements AddN AddV2 Addcdiv "
        "Addcmul Adds ApplyAdamV2 ApproximateEqual ArgMaxD ArgMaxGrad ArgMaxGradD ArgMaxV2 ArgMaxWithK "
        "ArgMaxWithValue ArgMin ArgMinD ArgMinWithValue Asin AsinGrad Asinh AsinhGrad Assign AssignAdd "
        "AssignSub Atan Atan2 AtanGrad Atanh Axpy AxpyV2 BesselI0e BesselI1e Bias BiasAdd BitwiseAnd "
        "BitwiseOr BitwiseXor Cast CastLike Ceil ClipByNormNoDivSum ClipByValue ClipByValueV2 "
        "ConfusionMulGrad Cos Cosh CosineEmbeddingLoss CosineSimilarity DataCompare Dawsn Div DivNoNan "
        "Dot Eltwise Equal Erfinv Exp Expint Expm1 FakeQuantWithMinMaxArgs "
        "FakeQuantWithMinMaxArgsGradient FakeQuantWithMinMaxVars FakeQuantWithMinMaxVarsGradient "
        "FakeQuantWithMinMaxVarsPerChannel FakeQuantWithMinMaxVarsPerChannelGradient Fills Floor FloorDiv "
        "FloorMod FresnelCos FresnelSin FusedMulAdd FusedMulAddAdd FusedMulAddN FusedMulAddNL2loss Gcd "
        "Greater GreaterEqual HardMax Inv InvGrad Invert IsClose KLDiv KLDivV2 LambApplyOptimizerAssign "
        "LambApplyWeightAssign LambNextMV LambNextMVWithDecay LambNextRight LambUpdateWithLr "
        "LambUpdateWithLrV2 Lerp Less LessEqual Log Log1p LogicalAnd LogicalNot LogicalOr MaskedScale "
        "MaxN Maximum MaximumGrad Minimum MinimumGrad Mod Mul MulNoNan Muls NanToNum Ndtri Neg NotEqual "
        "OnesLike PopulationCount Pow RealDiv Reciprocal ReciprocalGrad Rint Round Rsqrt RsqrtGrad Sign "
        "Sin Sinh Spence Sqrt SqrtGrad Square SquareSumAll SquareSumV1 SquareSumV2 SquaredDifference "
        "StrideAdd Sub Sxpy Tan TensorEqual TensorMove TensorRedirect Threshold TruncateDiv TruncateMod "
        "Xdivy Xlog1py Xlogy ZerosLike"
    ),
    "encoding_ops.h": "LDPCDecode",
    "functional_ops.h": (
        "Case ConditionCalc For If OpTiling PartitionedCall StatefulPartitionedCall StatelessCase "
        "StatelessIf StatelessWhile ToBool While _If _While"
    ),
    "fusion_ops.h": (
        "AGLU AllGatherMatmul AlltoAllAllGatherBatchMatMul BatchMatMulReduceScatterAlltoAll FFN "
        "FlashAttentionScore FlashAttentionScoreGrad FusedInferAttentionScore GeGluGradV2 GeGluV2 "
        "GeluQuant GroupedMatMulAllReduce GroupedMatmul IncreFlashAttention "
        "InplaceMatmulAllReduceAddRmsNorm MatmulAllReduce MatmulAllReduceAddRmsNorm MatmulLayerNormReduce "
        "MatmulReduceScatter MoeComputeExpertTokens MoeFinalizeRouting MoeGatingTopKSoftmax "
        "MoeInitRouting MoeInitRoutingQuant MoeInitRoutingV2 PromptFlashAttention RingAttentionUpdate "
        "SwinAttentionScoreQuant SwinTransformerLnQkvQuant TomeMerge TomeUnmerge WeightQuantBatchMatmulV2"
    ),
    "get_data_ops.h": "DeviceQueueDataset IteratorGetNext IteratorV2 MakeIterator",
    "hcom_ops.h": (
        "HcomAllGather HcomAllReduce HcomAllToAll HcomAllToAllV HcomAllToAllVC HcomBroadcast "
        "HcomGatherAllToAllV HcomReceive HcomReduce HcomReduceScatter HcomRemoteRead HcomRemoteRefRead "
        "HcomRemoteScatterWrite HcomRemoteWrite HcomSend"
    ),
    "hvd_ops.h": "HorovodAllgather HorovodAllreduce HorovodBroadcast",
    "image.h": (
        "AdjustBrightness AdjustBrightnessV2 AdjustContrastWithMean AdjustSaturationV2 GaussianBlur "
        "ImgCrop LUT3D ResizeTrilinear ResizeV2 RgbToGrayscale Rotate WarpAffineV2"
    ),
    "image_ops.h": (
        "AdjustContrast AdjustHue AdjustSaturation ChamferDistance ChamferDistanceGrad "
        "CombinedNonMaxSuppression CropAndResize CropAndResizeD CropAndResizeGradBoxes "
        "CropAndResizeGradImage CropAndResizeV2 DecodeAndCropJpeg DecodeBmp DecodeGif DecodeImage "
        "DecodeJpeg DecodePng DenseImageWarp DenseImageWarpGrad DrawBoundingBoxes DrawBoundingBoxesV2 "
        "EncodeJpeg EncodeJpegVariableQuality EncodePng ExtractGlimpse ExtractGlimpseV2 ExtractJpegShape "
        "GenerateBoundingBoxProposals GridSampler2D GridSampler2DGrad GridSampler3D GridSampler3DGrad "
        "GridUnnormal HSVToRGB IMGWarp IMGWarpOffsets IMGWarpResize ImageProjectiveTransform "
        "ImageProjectiveTransformV2 ImageUnfold ImgToTensor KeepRatioResizeBilinear NonMaxSuppression "
        "NonMaxSuppressionV2 NonMaxSuppressionV3 NonMaxSuppressionV4 NonMaxSuppressionV5 "
        "NonMaxSuppressionWithOverlaps NormalizeV2 QuantizedResizeBilinear RGBToHSV Remap Resize "
        "ResizeArea ResizeBicubic ResizeBicubicGrad ResizeBilinearV2 ResizeBilinearV2D "
        "ResizeBilinearV2Grad ResizeD ResizeGrad ResizeGradD ResizeNearestNeighborV2 "
        "ResizeNearestNeighborV2D ResizeNearestNeighborV2Grad ResizeNearestNeighborV2GradD "
        "SampleDistortedBoundingBox SampleDistortedBoundingBoxExt2 ScaleAndTranslate "
        "ScaleAndTranslateGrad SpatialTransformer SpatialTransformerD SyncResizeBilinearV2 "
        "SyncResizeBilinearV2Grad UpsampleNearest1d UpsampleNearest1dGrad UpsampleNearest3d "
        "UpsampleNearest3dGrad UpsampleTrilinear3d UpsampleTrilinear3dGrad WarpAffine"
    ),
    "index.h": (
        "BackgroundReplace CoalesceSparse MoeTutelCombineGates MoeTutelCombineX MoeTutelDispatch MrgbaCustom"
    ),
    "internal_ops.h": "AssistHelp CacheUpdate InternalDataMove",
    "linalg_ops.h": (
        "BandedTriangularSolve Cholesky CholeskyGrad ConjugateTranspose Ger LogMatrixDeterminant Lu "
        "MatrixDeterminant MatrixInverse MatrixSolve MatrixSolveLs MatrixSquareRoot MatrixTriangularSolve "
        "Qr SelfAdjointEig Slogdet Svd TridiagonalSolve"
    ),
    "list_ops.h": (
        "EmptyTensorList TensorListConcatLists TensorListConcatV2 TensorListElementShape "
        "TensorListFromTensor TensorListGather TensorListGetItem TensorListLength TensorListPopBack "
        "TensorListPushBack TensorListPushBackBatch TensorListReserve TensorListResize "
        "TensorListScatterIntoExistingList TensorListScatterV2 TensorListSetItem TensorListSplit "
        "TensorListStack"
    ),
    "logging_ops.h": "Assert Print PrintV2 PrintV3 Timestamp",
    "lookup_ops.h": (
        "HashTable InitializeTable LookupTableExport LookupTableFind LookupTableImport LookupTableInsert "
        "LookupTableRemove LookupTableSize MutableDenseHashTable MutableHashTable "
        "MutableHashTableOfTensors"
    ),
    "map_ops.h": (
        "EmptyTensorMap TensorMapErase TensorMapHasKey TensorMapInsert TensorMapLookup TensorMapSize "
        "TensorMapStackKeys"
    ),
    "math_ops.h": (
        "ActULQClampMaxGrad ActULQClampMinGrad ActsULQ ActsULQInputGrad Angle AngleV2 Betainc Bincount "
        "Bucketize Cdist CdistGrad CompareAndBitpack Complex ComplexAbs Conj Cross DenseBincount "
        "DenseCountSparseOutput Digamma EndOfSequence Erf Erfc GetDynamicDims GetNext Histogram "
        "HistogramFixedWidth HistogramFixedWidthD HistogramV2 IFMR Igamma IgammaGradA Igammac Imag "
        "InitData IsFinite IsInf IsNan IsNegInf IsPosInf Lgamma LpNorm LpNormReduce LpNormReduceV2 "
        "LpNormUpdate LpNormUpdateV2 LpNormV2 NLLLoss NLLLossGrad NextAfter Pdist Power RaggedBinCount "
        "RaggedBincount RaggedCountSparseOutput Real ScaledMaskedSoftmax ScaledMaskedSoftmaxGrad "
        "SignBitsPack SignBitsUnpack SilentCheck SobolSample SoftMarginLossGrad SparseBincount "
        "SparseCountSparseOutput SparseSegmentMean SparseSegmentMeanGrad SparseSegmentSum "
        "SparseSegmentSumGrad Trunc WtsARQ Zeta"
    ),
    "matrix_calculation_ops.h": (
        "AttentionLnQKV AttentionQKVGradW AttentionQKVGradX AttentionScore AttentionScoreGrad BatchMatMul "
        "BatchMatMulV2 ConfusionMatrix DiagPart DiagPartD DynamicQuantUpdateScatter Einsum Eye "
        "FillDiagonal FullyConnection FullyConnectionCompress GEMM IndexAdd IndexPut L2Loss "
        "MaskedSoftmaxWithRelPosBias MatMul MatMulV2 MatMulV2Compress MatrixDiag MatrixDiagD "
        "MatrixDiagPart MatrixDiagPartD MatrixDiagPartV2 MatrixDiagPartV3 MatrixDiagV2 MatrixDiagV3 "
        "MatrixSetDiag MatrixSetDiagD MatrixSetDiagV2 MatrixSetDiagV3 Pinverse QuantBatchMatmulV3 "
        "QuantUpdateScatter Scatter ScatterAdd ScatterAddWithAxis ScatterDiv ScatterElements "
        "ScatterElementsV2 ScatterList ScatterMax ScatterMaxWithArgmax ScatterMin ScatterMul ScatterNdAdd "
        "ScatterNdMax ScatterNdMin ScatterNdSub ScatterNdUpdate ScatterSub ScatterUpdate SwinAttentionFFN "
        "SwinAttentionScore SwinTransformerLnQKV TensorScatterAdd TensorScatterMax TensorScatterMin "
        "TensorScatterSub TensorScatterUpdate Trace Tril Triu"
    ),
    "nn_activation.h": "SwiGlu SwiGluGrad",
    "nn_batch_norm_ops.h": (
        "BNInference BNInferenceD BatchNorm BatchNorm3D BatchNorm3DGrad BatchNormExt2 BatchNormGrad "
        "BatchNormGradExt2 L2Normalize L2NormalizeGrad SyncBNTrainingUpdate SyncBatchNormBackwardElemt "
        "SyncBatchNormBackwardReduce SyncBatchNormGatherStats SyncBatchNormGatherStatsWithCounts"
    ),
    "nn_calculation_ops.h": (
        "BiasAddGrad Conv2D Conv2DBackpropFilter Conv2DBackpropFilterD Conv2DBackpropInput "
        "Conv2DBackpropInputD Conv2DCompress Conv2DTranspose Conv2DTransposeD Conv3D Conv3DBackpropFilter "
        "Conv3DBackpropFilterD Conv3DBackpropInput Conv3DBackpropInputD Conv3DTranspose Conv3DTransposeD "
        "Deconvolution DeformableConv2D DeformableOffsets DeformableOffsetsGrad DepthwiseConv2D "
        "DepthwiseConv2DBackpropFilter DepthwiseConv2DBackpropFilterD DepthwiseConv2DBackpropInput "
        "DepthwiseConv2DBackpropInputD Dilation FixPipe IsotonicRegression LSTM QuantConv2D"
    ),
    "nn_detect.h": "RoiAlignRotated",
    "nn_detect_ops.h": (
        "AnchorResponseFlags BalanceRois BatchMultiClassNonMaxSuppression BoundingBoxDecode "
        "BoundingBoxEncode CIoU CIoUGrad CheckValid ClipBoxes ClipBoxesD DIoU DIoUGrad DecodeBbox "
        "DecodeBboxV2 DecodeBoundariesTarget DecodeCornerpointsTargetBG "
        "DecodeCornerpointsTargetWrtCenterV1 DecodeWheelsTarget FSRDetectionOutput FastrcnnPredictions "
        "GIoU GIoUGrad GridAssignPositive Iou Iou3D NonMaxSuppressionV6 NonMaxSuppressionV7 NormalizeBBox "
        "PSROIPooling PSROIPoolingGradV2D PSROIPoolingV2 PriorBox PriorBoxD PriorBoxDV2 PtIou ROIAlign "
        "ROIAlignGrad ROIPooling RoiExtractor RoiPoolingWithArgMax RotatedBoxDecode RotatedBoxEncode "
        "RotatedIou RotatedOverlaps RpnProposalPostProcessing RpnProposals RpnProposalsD SPP "
        "SSDDetectionOutput Sort ToAbsoluteBBox Yolo YoloBoxesEncode YoloPreDetection "
        "YoloV2DetectionOutput YoloV2DetectionOutputD YoloV3DetectionOutput YoloV3DetectionOutputD "
        "YoloV3DetectionOutputV2 YoloV3DetectionOutputV2D YoloV5DetectionOutput YoloV5DetectionOutputD "
        "YoloxBoundingBoxDecode"
    ),
    "nn_norm.h": (
        "AddLayerNormQuant AddRmsNorm AddRmsNormQuant DuaQuantizeAddLayerNorm GroupNorm GroupNormGrad "
        "GroupNormSilu GroupNormV2 InplaceAddLayerNorm InplaceAddRmsNorm QuantizeAddLayerNorm"
    ),
    "nn_norm_ops.h": (
        "AddLayerNorm AddLayerNormGrad AxpyWithSoftmaxAndDropOutDoMask BinaryCrossEntropy "
        "BinaryCrossEntropyGrad Centralization ConfusionSoftmaxGrad DeepNorm DeepNormGrad DropOutDoMask "
        "DropOutDoMaskV3 DropOutDoMaskV3D DropoutWithMulsAndSoftmaxGrad GroupNormRelu INInferV2D "
        "InstanceNorm InstanceNormGrad InstanceNormV2 KlDivLossGrad L1LossGrad LNDropoutGrad LRN LRNGrad "
        "LayerNorm LayerNormBetaGammaBackprop LayerNormBetaGammaBackpropV2 LayerNormGrad LayerNormGradV3 "
        "LayerNormUpdate LayerNormV3 LayerNormV4 LayerNormXBackprop LayerNormXBackpropV2 "
        "LayerNormXBackpropV3 LogSoftmaxGrad LogSoftmaxV2 LpLoss MVN MVNV2 MseLoss MseLossGrad "
        "MultilabelMarginLoss Normalize NormalizeBatch PoissonNllLoss RNNTLoss Renorm RmsNorm RmsNormGrad "
        "RnnGenMask Roll RollV2 Scale SigmoidCrossEntropyWithLogits SigmoidCrossEntropyWithLogitsGrad "
        "SigmoidCrossEntropyWithLogitsGradV2 SigmoidCrossEntropyWithLogitsV2 SigmoidFocalLoss "
        "SigmoidFocalLossGrad SmoothL1Loss SmoothL1LossGrad SmoothL1LossGradV2 SmoothL1LossV2 "
        "SoftMarginLoss SoftmaxCrossEntropyLoss SoftmaxCrossEntropyWithLogits SoftmaxFocalLoss "
        "SoftmaxFocalLossGrad SoftmaxGrad SoftmaxGradExt SoftmaxV2 SoftmaxV2WithDropOutDoMaskV3D "
        "SparseSoftmaxCrossEntropyWithLogits"
    ),
    "nn_ops.h": (
        "FusedBatchNormV2 InTopKV2 MultiHeadAttention MultiHeadAttentionGrad MultiMerge SegmentSort "
        "SingleMerge"
    ),
    "nn_optimizer.h": "ApplyCamePart1 ApplyCamePart2 ApplyCamePart3 ApplyCamePart4",
    "nn_other.h": (
        "ApplyRotaryPosEmb BlendImagesCustom EmbeddingApplyAdaGrad EmbeddingApplyAdam EmbeddingApplyAdamW "
        "EmbeddingApplyFtrl EmbeddingApplyRmsprop EmbeddingApplySgd EmbeddingComputeVarExport "
        "EmbeddingComputeVarImport EmbeddingFeatureMapping EmbeddingFeatureMappingExport "
        "EmbeddingFeatureMappingFileSize EmbeddingFeatureMappingFind EmbeddingFeatureMappingImport "
        "EmbeddingFeatureMappingInsert EmbeddingFeatureMappingTableSize EmbeddingFeatureMappingV2 "
        "EmbeddingTableEvict EmbeddingTableExport EmbeddingTableFind EmbeddingTableFindAndInit "
        "EmbeddingTableImport ExponentialDecayLR FakeRemoteLookupUniqued FillWindowCache "
        "InitEmbeddingHashmap InitPartitionMap RotaryMul RotaryMulGrad RotaryPositionEmbedding "
        "RotaryPositionEmbeddingGrad TableToResource UninitEmbeddingHashmap UninitPartitionMap"
    ),
    "nn_pooling.h": "RoiPoolingGradWithArgMax",
    "nn_pooling_ops.h": (
        "AdaptiveAvgPool AdaptiveAvgPool2d AdaptiveAvgPool2dGrad AdaptiveMaxPool2d AvgPool AvgPool1D "
        "AvgPool1DD AvgPool3D AvgPool3DD AvgPool3DGrad AvgPool3DGradD AvgPoolGrad AvgPoolGradD AvgPoolV2 "
        "AvgPoolV2Grad AvgPoolV2GradD DataFormatVecPermute Dilation2D Dilation2DBackpropFilter "
        "Dilation2DBackpropInput FractionalAvgPool FractionalAvgPoolGrad FractionalMaxPool "
        "FractionalMaxPoolGrad GlobalAveragePool GlobalLpPool Mask2Argmax MaxPool MaxPool3D MaxPool3DGrad "
        "MaxPool3DGradGrad MaxPool3DWithArgmax MaxPoolExt2 MaxPoolGrad MaxPoolGradGrad "
        "MaxPoolGradGradWithArgmax MaxPoolGradWithArgmax MaxPoolGradWithArgmaxV1 MaxPoolGradWithArgmaxV2 "
        "MaxPoolV2 MaxPoolV3 MaxPoolV3Grad MaxPoolWithArgmax MaxPoolWithArgmaxV1 MaxPoolWithArgmaxV2 "
        "NthElement Pooling SubSample SubSampleLabels Upsample"
    ),
    "nn_quantize.h": "DynamicQuant DynamicQuantV2 FakeQuantAffineCachemask TransQuantParamV2",
    "nn_recurrent.h": "BasicGRUInplaceFillWindowCache BasicLSTMInplaceFillWindowCache",
    "nn_training_ops.h": (
        "ApplyAdaMax ApplyAdaMaxD ApplyAdadelta ApplyAdadeltaD ApplyAdagrad ApplyAdagradD ApplyAdagradDA "
        "ApplyAdagradDAD ApplyAdagradV2 ApplyAdagradV2D ApplyAdam ApplyAdamD ApplyAdamWithAmsgrad "
        "ApplyAdamWithAmsgradD ApplyAdamWithAmsgradV2 ApplyAddSign ApplyAddSignD ApplyCenteredRMSProp "
        "ApplyCenteredRMSPropD ApplyFtrl ApplyFtrlD ApplyFtrlV2 ApplyFtrlV2D ApplyGradientDescent "
        "ApplyKerasMomentum ApplyKerasMomentumD ApplyMomentum ApplyMomentumD ApplyPowerSign "
        "ApplyPowerSignD ApplyProximalAdagrad ApplyProximalAdagradD ApplyProximalGradientDescent "
        "ApplyRMSProp ApplyRMSPropD AtomicAddrClean DataFormatDimMap DynamicAtomicAddrClean "
        "FusedMulApplyKerasMomentum FusedMulApplyMomentum FusedMulApplyMomentumExtern LarsV2 LarsV2Update "
        "SGD SparseApplyAdadelta SparseApplyAdadeltaD SparseApplyAdagrad SparseApplyAdagradD "
        "SparseApplyAdagradV2 SparseApplyAdagradV2D SparseApplyFtrl SparseApplyFtrlD SparseApplyFtrlV2 "
        "SparseApplyFtrlV2D SparseApplyProximalAdagrad SparseApplyProximalAdagradD SparseApplyRMSProp "
        "SparseApplyRMSPropD"
    ),
    "no_op.h": "NoOp",
    "nonlinear_fuc_ops.h": (
        "BNLL Celu CeluV2 Elu EluGrad EluGradV2 FastGelu FastGeluGrad FastGeluV2 GLU GLUGrad Gelu "
        "GeluGrad HardShrink HardShrinkGrad HardSigmoid HardSigmoidGrad HardSwish HardSwishGrad "
        "HardtanhGrad LeakyRelu LeakyReluGrad LogSigmoid LogSigmoidGrad Mish MishGrad PRelu PReluGrad "
        "Relu Relu6 Relu6D Relu6Grad ReluGrad ReluGradV2 ReluV2 Selu SeluGrad Shrink Sigmoid SigmoidGrad "
        "SiluGrad SoftShrink SoftShrinkGrad Softplus SoftplusGrad SoftplusV2 SoftplusV2Grad Softsign "
        "SoftsignGrad Swish SwishGrad Tanh TanhGrad ThresholdGradV2D ThresholdV2 ThresholdV2D "
        "ThresholdedRelu"
    ),
    "npu_loss_scale_ops.h": (
        "NPUAllocFloatStatus NPUAllocFloatStatusOperator NPUClearFloatDebugStatus NPUClearFloatStatus "
        "NPUClearFloatStatusOperator NPUClearFloatStatusV2 NPUGetFloatDebugStatus NPUGetFloatStatus "
        "NPUGetFloatStatusOperator NPUGetFloatStatusV2"
    ),
    "ocr_ops.h": (
        "BatchDilatePolys BatchEnqueue Dequeue OCRDetectionPostHandle OCRDetectionPreHandle "
        "OCRFindContours OCRIdentifyPreHandle OCRRecognitionPreHandle ResizeAndClipPolys"
    ),
    "pad_ops.h": (
        "AscendPadding BroadcastTo BroadcastToD Diag DiagD DiagFlat DiagV2 EmbeddingLocalIndex "
        "EmbeddingRankId Fill FillD FillV2 FillV2D Pad PadD PadV2 PadV2D PadV3 PadV3D PadV3Grad"
    ),
    "parsing_ops.h": (
        "DecodeCSV DecodeRaw ParseExample ParseSingleExample ParseSingleSequenceExample ParseTensor "
        "StringToNumber"
    ),
    "quantize_ops.h": (
        "AscendAntiQuant AscendAntiQuantV2 AscendDequant AscendDequantS16 AscendQuant AscendQuantV2 "
        "AscendRequant AscendRequantS16 AscendWeightQuant Dequantize Quantize"
    ),
    "ragged_array_ops.h": "RaggedGather",
    "ragged_conversion_ops.h": "RaggedTensorToSparse RaggedTensorToTensor",
    "ragged_math_ops.h": "RaggedRange",
    "random_ops.h": (
        "ContinuationIndicator DropOutGenMask DropOutGenMaskV3 DropOutGenMaskV4 Dropout DropoutV2 "
        "Exponential Geometric LinSpace LinSpaceD Multinomial MultinomialAliasDraw MultinomialAliasSetup "
        "MultinomialFuss MultinomialWithReplacement Normal ParameterizedTruncatedNormal Poisson "
        "RandomChoiceWithMask RandomGamma RandomGammaGrad RandomPoisson RandomShuffle "
        "RandomStandardNormal RandomUniform RandomUniformInt Randperm ShuffleChannel StatelessBernoulli "
        "StatelessBernoulliV2 StatelessDropOutGenMask StatelessRandperm TruncatedNormal Uniform"
    ),
    "randomdsa_ops.h": (
        "DSAGenBitMask DSARandomNormal DSARandomTruncatedNormal DSARandomUniform DSAStatelessGenBitMask "
        "DSAStatelessRandomNormal DSAStatelessRandomTruncatedNormal DSAStatelessRandomUniform"
    ),
    "reduce.h": "ReduceMeanWithCast",
    "reduce_ops.h": (
        "BN3DTrainingReduce BN3DTrainingReduceGrad BN3DTrainingUpdate BN3DTrainingUpdateGrad BNInfer "
        "BNInferGrad BNTrainingReduce BNTrainingReduceGrad BNTrainingUpdate BNTrainingUpdateGrad "
        "BNTrainingUpdateV2 BNTrainingUpdateV3 EuclideanNorm EuclideanNormD GNTrainingReduce "
        "GNTrainingUpdate GroupedBiasAddGrad INInferV2 INTrainingReduceGrad INTrainingReduceV2 "
        "INTrainingUpdateGrad INTrainingUpdateGradGammaBeta INTrainingUpdateV2 ReduceAll ReduceAllD "
        "ReduceAny ReduceAnyD ReduceJoin ReduceLogSum ReduceLogSumExp ReduceMax ReduceMaxD ReduceMean "
        "ReduceMeanD ReduceMeanVariance ReduceMeanWithCount ReduceMin ReduceMinD ReduceNansum ReduceProd "
        "ReduceProdD ReduceStd ReduceStdV2Update ReduceStdWithMean ReduceSum ReduceSumD Reduction"
    ),
    "resource_variable_ops.h": "AssignAddVariableOp AssignSubVariableOp AssignVariableOp VarHandleOp",
    "rnn.h": (
        "AUGRUHiddenGradCell BasicLSTMCell BasicLSTMCellCStateGrad BasicLSTMCellInputGrad "
        "BasicLSTMCellWeightGrad BasicRNNCell CommonGRU CommonLSTM DynamicAUGRU DynamicAUGRUGrad "
        "DynamicGRU DynamicGRUCellGrad DynamicGRUV2 DynamicGRUV2Grad DynamicGRUV2Hidden DynamicLSTM "
        "DynamicLSTMGradCell DynamicLSTMV2 DynamicRNN DynamicRNNGrad DynamicRNNV2 DynamicRNNV2Grad "
        "DynamicRNNV3 EmbeddingBag EmbeddingDenseGrad GRUV2HiddenGradCell LSTMInputGrad LSTMP RNN "
        "RnnGenMaskV2"
    ),
    "rpn_ops.h": "NMSWithMask SortedNMS",
    "save_ops.h": "Save",
    "sdca_ops.h": "SdcaOptimizerV2",
    "selection.h": "IndexByTensor",
    "selection_ops.h": (
        "AddRowRanges Crop Cummax Cummin Cumprod CumprodD Cumsum CumsumD CumulativeLogsumexp "
        "CumulativeLogsumexpD DynSeqOuter Gather GatherD GatherElements GatherNd GatherV2 GatherV2D "
        "InTopK InTopKD IndexFillD InplaceAdd InplaceAddD InplaceIndexAdd InplaceSub InplaceSubD "
        "InplaceTopKDistance InplaceUpdate InplaceUpdateD LogSpaceD MaskedFill MaskedFillRange "
        "MaskedScatter MaskedSelect MaskedSelectV2 MovingSumWithSigmoid NonMaxSuppressionBucketize OneHot "
        "OneHotD PassThrough Proposal ProposalD Range RangeD ReadSelect RepeatInterleave "
        "RepeatInterleaveGrad ReverseV2 ReverseV2D ScatterNd ScatterNdD ScatterNonAliasingAdd "
        "SearchSorted SegmentMax SegmentMaxD SegmentSum Select SelectV2 Slice SliceD SliceDV2 "
        "SliceLastDim SliceWithAxes StridedRead StridedSlice StridedSliceAssign StridedSliceAssignD "
        "StridedSliceAssignV2 StridedSliceD StridedSliceGrad StridedSliceGradD StridedSliceV2 "
        "StridedSliceV3 StridedWrite Tile TileD TileWithAxis TopK TopKD TopKPQDistanceMerge TopKV2 "
        "TopKV2D UnsortedSegmentMax UnsortedSegmentMaxD UnsortedSegmentMin UnsortedSegmentMinD "
        "UnsortedSegmentProd UnsortedSegmentProdD UnsortedSegmentSum UnsortedSegmentSumD WriteSelect"
    ),
    "set_ops.h": "DenseToDenseSetOperation DenseToSparseSetOperation SetSize SparseToSparseSetOperation",
    "sparse_ops.h": (
        "AddManySparseToTensorsMap AddSparseToTensorsMap DeserializeManySparse DeserializeSparse "
        "SerializeManySparse SerializeSparse SparseAdd SparseAddGrad SparseConcat SparseCross "
        "SparseDenseCwiseAdd SparseDenseCwiseDiv SparseDenseCwiseMul SparseFillEmptyRows "
        "SparseFillEmptyRowsGrad SparseReduceMax SparseReduceMaxSparse SparseReduceSum "
        "SparseReduceSumSparse SparseReorder SparseReshape SparseSlice SparseSliceGrad SparseSoftmax "
        "SparseSparseMaximum SparseSparseMinimum SparseSplit SparseTensorDenseAdd SparseTensorDenseMatMul "
        "SparseToDense TakeManySparseFromTensorsMap"
    ),
    "spectral_ops.h": "FFT FFT2D IFFT IFFT2D IRFFT RFFT STFT",
    "split_combination_ops.h": (
        "Combinations Concat ConcatD ConcatOffset ConcatOffsetD ConcatV2 ConcatV2D Pack ParallelConcat "
        "PhonyConcat PhonySplit Split SplitD SplitV SplitVD"
    ),
    "state_ops.h": (
        "CountUpTo DestroyTemporaryVariable IsVariableInitialized TemporaryVariable VarIsInitializedOp "
        "Variable"
    ),
    "stateful_random_ops.h": (
        "NonDeterministicInts RngReadAndSkipV2 RngSkip StatefulRandomBinomial StatefulStandardNormalV2 "
        "StatefulTruncatedNormal StatefulUniform StatefulUniformFullInt StatefulUniformInt"
    ),
    "stateless_random_ops.h": (
        "AnonymousSeedGenerator DeleteSeedGenerator DummySeedGenerator StatelessMultinomial "
        "StatelessParameterizedTruncatedNormal StatelessRandomBinomial StatelessRandomGammaV2 "
        "StatelessRandomGetAlg StatelessRandomGetKeyCounter StatelessRandomGetKeyCounterAlg "
        "StatelessRandomNormalV2 StatelessRandomPoisson StatelessRandomUniformFullInt "
        "StatelessRandomUniformFullIntV2 StatelessRandomUniformInt StatelessRandomUniformIntV2 "
        "StatelessRandomUniformV2 StatelessSampleDistortedBoundingBox StatelessTruncatedNormalV2"
    ),
    "string_ops.h": (
        "AsString DecodeBase64 EncodeBase64 RegexFullMatch RegexReplace StaticRegexFullMatch "
        "StaticRegexReplace StringFormat StringJoin StringLength StringLower StringNGrams "
        "StringNormalizer StringSplit StringSplitV2 StringStrip StringToHashBucket StringToHashBucketFast "
        "StringToHashBucketStrong StringUpper Substr UnicodeDecode UnicodeDecodeWithOffsets UnicodeEncode "
        "UnicodeScript UnicodeTranscode UnsortedSegmentJoin"
    ),
    "swap_co_ops.h": "SwapCo",
    "target_crop_and_resize.h": "TargetCropAndResize",
    "transformation.h": "TransArgb",
    "transformation_ops.h": (
        "AffineGrid AsStrided BatchToSpace BatchToSpaceD BatchToSpaceND BatchToSpaceNDD Bitcast Col2ImV2 "
        "Col2im Compress CompressFcOp ConfusionTranspose ConfusionTransposeD DepthToSpace "
        "DepthwiseWeight4DTo6D DepthwiseWeight6DTo4D ExtractImagePatches ExtractVolumePatches Flatten "
        "FlattenV2 Im2col Permute SpaceToBatch SpaceToBatchD SpaceToBatchND SpaceToBatchNDD SpaceToDepth "
        "TfIdfVectorizer TransData TransDataRNN Transpose TransposeD Unpack"
    ),
    "vector_search.h": (
        "CalcBucketsLimitAndOffset CaseCondition Coordinates1DTo2D GenADC IndexToAddr ScanPQCodes "
        "SliceWrite TopKPQDistance TopKPQDistanceV2"
    ),
    "warp_perspective_ops.h": "WarpPerspective",
}
"""Every op type registered (``REG_OP``) in the source folder above, by header (space-separated)."""

OP_TYPES: dict[str, str] = {op.lower(): op for ops in OP_TYPES_BY_HEADER.values() for op in ops.split()}
"""Every registered op type, by its lower-case name (GE writes ``BatchMatmul`` for ``BatchMatMul``)."""


def canonical_op_type(op_type: str) -> str:
    """The op type an alias stands for (``ReduceSumD`` → ``ReduceSum``); any other name unchanged."""
    alias = OP_ALIASES.get(op_type)
    return alias[0] if alias else op_type


# ---- an op's type from its name (when the export has no type column) ----

_HCOM_TYPE = re.compile(r"^(hcom_[A-Za-z]+_)")
_TRAILING_NUM = re.compile(r"(_\d+)+$")
_INSTANCE_NUM = re.compile(r"(?<=[A-Za-z])\d+$")


def op_type_from_name(name: str) -> str:
    """Op type of a kernel when the export has none (Level0 writes ``N/A``).

    aclnn kernels are ``<api>_<kernel>_<Type>`` (``aclnnMm_MatMulCommon_MatMulV2`` → ``MatMulV2``);
    TransData inserts are ``trans_TransData_<n>``; single ops run through aclop are the type plus an
    instance counter (``Conv2D1``, ``ReduceSum7``, ``Conv2DBackpropFilter6_MemSet``), and the counter
    is dropped. Which types themselves end in digits (``MatMulV2``, ``Expm1``, ``Atan2``) is decided by
    CANN's operator list (:data:`~fsdpbench.trace.ascend_ops.DIGIT_OP_TYPES`): the longest listed type
    the name starts with, followed by digits only, wins (``MatMulV21`` → ``MatMulV2``). A type not in
    the list that ends in ``V<digit>`` keeps that one version digit (``MatMulV3``, ``MatMulV31``).
    GE's atomic-clean kernels (``atomic_memset-1_271``) are ``MemSet``, as Level1 types them
    (:data:`~fsdpbench.trace.ascend_ops.NAME_PREFIX_TYPES`); a node GE split out of another
    (``AdaptiveAvgPool2d24LeftBatchMatMulV2``) is the op type it names (:func:`_split_node_type`).
    """
    m = _HCOM_TYPE.match(name)
    if m:
        return m.group(1)
    for prefix, (op_type, _) in NAME_PREFIX_TYPES.items():
        if name.startswith(prefix):
            return op_type
    base = _TRAILING_NUM.sub("", name)
    if "_" in base:
        return base.rsplit("_", 1)[-1] or name
    plain = _without_counter(base)
    if plain.lower() not in OP_TYPES:
        return _split_node_type(base) or plain
    return plain


def _without_counter(base: str) -> str:
    """``base`` without its trailing instance counter, the digits of a listed type kept."""
    stripped = _INSTANCE_NUM.sub("", base)
    if stripped == base:
        return base
    for end in range(len(base), len(stripped), -1):  # longest listed type first
        if base[:end] in DIGIT_OP_TYPES:
            return base[:end]
    if stripped.endswith("V"):
        return base[: len(stripped) + 1]  # MatMulV31 → MatMulV3 (versions are one digit)
    return stripped or base


_SPLIT_AT = re.compile(r"(?<=[A-Za-z])\d+(?:Left|Right)?(?=[A-Z])")


def _split_node_type(base: str) -> str | None:
    """The op type of a GE node split out of another, named ``<op><counter>[Left|Right]<op>…``
    (``AdaptiveAvgPool2d24LeftBatchMatMulV2`` → ``BatchMatMulV2``, ``…Grad71RightBatchMatmul`` →
    ``BatchMatMul``, as the Level1 export of the same run types them): the longest registered op type
    (:data:`~fsdpbench.trace.ascend_ops.OP_TYPES`, any case) after a registered op and its counter."""
    for m in _SPLIT_AT.finditer(base):
        if base[: m.start()].lower() not in OP_TYPES:
            continue
        rest = base[m.end() :].lower()
        for end in range(len(rest), 0, -1):
            if rest[:end] in OP_TYPES:
                return OP_TYPES[rest[:end]]
    return None
