// Built by pipelines/engines.py (`cluster flink up`) into the Flink cluster's job server
// launcher; see flink_cluster_job_server there.
//
// Beam's Flink job server ships its own classpath with every job it submits to a remote
// cluster (PipelineResourcesOptions: a classpath scan; here ~150 MB of jars, 13 s of
// upload per pipeline). A cluster that has Beam's runner on its TaskManagers' classpath
// (the Flink cluster of pipelines/clusters.py; a real one with the runner in Flink's lib/)
// needs none of it: this detector stages nothing.
package tokenfactory.flink;

import java.util.Collections;
import java.util.List;
import org.apache.beam.sdk.util.construction.resources.PipelineResourcesDetector;

public final class ClusterClasspath implements PipelineResourcesDetector.Factory {
  public static ClusterClasspath create() {
    return new ClusterClasspath();
  }

  @Override
  public PipelineResourcesDetector getPipelineResourcesDetector() {
    return new Nothing();
  }

  private static final class Nothing implements PipelineResourcesDetector {
    private static final long serialVersionUID = 1L;

    @Override
    public List<String> detect(ClassLoader classLoader) {
      return Collections.emptyList();
    }
  }
}
