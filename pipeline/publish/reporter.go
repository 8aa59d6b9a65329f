package publish

import "github.com/phonellm/phonellm/pipeline"

// Reporter receives progress: the shared pipeline.Reporter.
type Reporter = pipeline.Reporter
