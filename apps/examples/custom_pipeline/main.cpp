// custom-pipeline: a user's own training pipeline on gradmesh, built against an installed gradmesh
// (find_package(gradmesh)). It trains Fashion-MNIST with
//   - the built-in data source (this node's shard of the training set),
//   - a pre-processing task of its own: random shifts of each image (random_shift.h),
//   - a layer kind of its own: leaky_relu (leaky_relu.h), named in the job config,
//   - a loss of its own: label smoothing (label_smoothing.h), the config's last model entry,
//   - a gradient compressor of its own: int16 against one scale a buffer (scaled_int16.h), named
//     in the job config's [sync.compression] like a built-in one,
//   - an evaluation on the test set after each epoch, with a metric of its own (top-2 accuracy,
//     written to the metrics file beside loss and accuracy),
// and whatever sync strategy the job config names; gradmesh attaches it after each layer's
// backward task (WFBP), connects the nodes and writes the same metrics as gradmesh-node.
//
//   gradmesh-launch -n 2 --node ./custom-pipeline --config job.toml --metrics-out out

#include <memory>
#include <vector>

#include "apps/pipeline/pipeline.h"
#include "label_smoothing.h"
#include "leaky_relu.h"
#include "random_shift.h"
#include "scaled_int16.h"
#include "sync/compress/compressor.h"
#include "tasks/data/fashion_mnist.h"

int main(int argc, char** argv) {
  gradmesh::tasks::register_layer("leaky_relu", custom::LeakyRelu::make);
  gradmesh::tasks::register_loss("label_smoothing", custom::LabelSmoothing::make);
  // Before the pipeline is built: its sync strategies read the registry then.
  gradmesh::sync::compress::register_compressor(custom::scaled_int16_compressor());
  const auto cli = gradmesh::app::parse_node_command_line(argc, argv, "custom-pipeline");
  if (!cli.options) return cli.exit_status;

  return gradmesh::app::run_main([&] {
    gradmesh::app::Pipeline pipeline(*cli.options);
    const auto& config = pipeline.config();
    const gradmesh::tasks::TrainTest data = gradmesh::tasks::load_fashion_mnist(config.data.path);
    const gradmesh::tasks::Dataset test =
        gradmesh::tasks::take_first(data.test, config.data.test_limit.value_or(data.test.count));

    pipeline.set_source(std::make_unique<gradmesh::app::DatasetSource>(data.train));
    pipeline.add_preprocess(
        "random_shift",
        [shift = custom::RandomShift(gradmesh::tasks::sample_shape(data.train), 2, config.job.seed,
                                     pipeline.rank())](
            gradmesh::app::Batch& batch, gradmesh::engine::TaskContext&) mutable { shift(batch); });
    pipeline.set_evaluation(
        [&test, logits = std::vector<float>()](gradmesh::tasks::Model& model) mutable {
          gradmesh::tasks::Model::Evaluation e = model.evaluate(test);
          logits.resize(test.count * model.output_size());
          model.predict(test.x, logits);
          e.metrics.emplace_back("top2_accuracy",
                                 custom::top_k_accuracy(logits, test.y, model.output_size(), 2));
          return e;
        });
    pipeline.run();
  });
}
